/* fl_config.h - the job file: one YAML document describing a training job.
 *
 * A job file has the sections model, data, optimizer, lr_schedule, train,
 * cluster, pserver and strategy (the last one with Paddle Fleet's
 * DistributedStrategy names, so a Fleet user finds the knobs they know).
 * It is parsed with libyaml into `fl_job`, a plain struct with every field
 * defaulted: fixed-size char arrays for strings and fixed arrays for lists,
 * so it holds no heap memory, can be copied with `=` and needs no free.
 *
 * Strictness: an unknown key, a duplicate key, a value of the wrong type, an
 * out-of-range value, a strategy Flotilla does not implement set to anything
 * but its default, and inconsistent fields (lars with a non-momentum
 * optimizer, lars and lamb together, ...) all fail with FL_EINVAL and one
 * message naming file:line:column and the key path, e.g.
 *   job.yaml:12:3: strategy.gradient_merge_configs.k_steps: must be >= 1, got 0
 * The message is logged once (FL_LOGE) and kept for fl_job_last_error().
 *
 * Normalisation at load (so the struct always says what will run):
 *   - optimizer.name lars / lamb becomes momentum + strategy.lars: true /
 *     adam + strategy.lamb: true;
 *   - optimizer.hp.epsilon left out takes the default of the effective
 *     optimizer (1e-8; 1e-6 under lamb);
 *   - pserver.optimizer left out is a copy of the (normalised) optimizer;
 *   - strategy.fp16_allreduce: true sets strategy.grad_compression = fp16.
 * fl_job_write_yaml() dumps the resolved struct; loading the dump gives the
 * same struct again, byte for byte.
 *
 * Deviation from Paddle, on purpose: strategy.a_sync defaults to false (PS
 * mode is synchronous unless asked), and fuse_grad_size_in_TFLOPS to 50
 * (docs/DESIGN.md section 6); hierarchical_allreduce_inter_nranks 0 means
 * "ranks per node, from the cluster". */
#ifndef FL_CONFIG_H
#define FL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fl_layers.h"
#include "fl_names.h"
#include "fl_optim.h"
#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FL_JOB_PATH_MAX 512   /* bytes of every path field, NUL included */
#define FL_JOB_NAME_MAX 64    /* bytes of every list-of-names entry */
#define FL_JOB_MAX_HIDDEN 16  /* model.hidden entries */
#define FL_JOB_MAX_LIST 16    /* entries of exclude_from_weight_decay etc. */
#define FL_JOB_MAX_INPUTS 8   /* entries of data.inputs / data.test_inputs */

/* How the trainers cooperate (cluster.mode, FLOTILLA_MODE, --mode). */
typedef enum fl_mode {
  FL_MODE_LOCAL = 0,      /* one trainer, no communication */
  FL_MODE_COLLECTIVE = 1, /* peers, allreduce */
  FL_MODE_PS = 2,         /* parameter servers */
  FL_MODE_COUNT
} fl_mode;

/* "local", "collective", "ps" and back; parse gives FL_EINVAL on another
 * name (without logging: callers say where the name came from). */
const char *fl_mode_name(fl_mode mode);

/* strategy.allreduce_algorithm (the collective engine's names). */
typedef enum fl_allreduce_algorithm {
  FL_AR_AUTO = 0,
  FL_AR_RING,
  FL_AR_HALVING_DOUBLING,
  FL_AR_TREE,
  FL_AR_HIERARCHICAL,
  FL_AR_COUNT
} fl_allreduce_algorithm;
const char *fl_allreduce_algorithm_name(fl_allreduce_algorithm a);
fl_status fl_mode_parse(const char *name, fl_mode *out);

typedef enum fl_data_format {
  FL_DATA_IDX = 0,      /* IDX images + labels (MNIST, Fashion-MNIST), gz or plain */
  FL_DATA_LIBSVM = 1,   /* libsvm / Criteo-style text for the CTR model */
  FL_DATA_SYNTHETIC = 2, /* seeded generator (data.synthetic) */
  FL_DATA_NPY = 3,       /* numpy.save files: data.train_x/_y, test_x/_y */
  FL_DATA_CRITEO = 4,    /* Criteo TSV, streamed: data.train_path / test_path */
  FL_DATA_FORMAT_COUNT
} fl_data_format;

typedef enum fl_grad_compression {
  FL_COMPRESS_NONE = 0, /* fp32 on the wire */
  FL_COMPRESS_FP16 = 1,
  FL_COMPRESS_BF16 = 2,
  FL_COMPRESS_COUNT
} fl_grad_compression;

typedef enum fl_amp_dtype { FL_AMP_FLOAT16 = 0, FL_AMP_BFLOAT16 = 1, FL_AMP_DTYPE_COUNT } fl_amp_dtype;

/* model.norm: the cnn preset's normalisation after each convolution. */
typedef enum fl_norm_kind {
  FL_NORM_NONE = 0,
  FL_NORM_BN = 1, /* batch norm */
  FL_NORM_GN = 2, /* group norm (model.gn_groups) */
  FL_NORM_COUNT
} fl_norm_kind;
/* Their names ("none", "bn", "gn"), indexed by fl_norm_kind, NULL-terminated. */
extern const char *const fl_norm_names[];
/* One of fl_norm_names into *out, NULL or "" being none (a model spec's
 * norm); FL_EINVAL for another name, not logged (callers say where the name
 * came from). */
fl_status fl_norm_parse(const char *name, fl_norm_kind *out);

/* data.synthetic.kind: what the seeded generator makes. */
typedef enum fl_synth_kind {
  FL_SYNTH_IMAGE = 0, /* learnable images for the presets */
  FL_SYNTH_CTR = 1,   /* sparse CTR samples for the ctr model */
  FL_SYNTH_COUNT
} fl_synth_kind;
/* Their names, indexed by fl_synth_kind, NULL-terminated. */
extern const char *const fl_synth_kind_names[];

/* Where a trainer computes (train.device, as Paddle's set_device): the host
 * CPU, or a CUDA GPU (the one FLOTILLA_SELECTED_GPUS gives the trainer,
 * else local rank % GPUs on the node). */
typedef enum fl_train_device { FL_DEVICE_CPU = 0, FL_DEVICE_GPU = 1, FL_DEVICE_COUNT } fl_train_device;
/* Their names ("cpu", "gpu"), indexed by fl_train_device, NULL-terminated:
 * also a model spec's device. */
extern const char *const fl_train_device_names[];

/* ------------------------------------------------------------------ model */
typedef struct fl_job_model {
  char kind[16];      /* "logreg", "mlp" (default), "cnn", "plugin", "ctr", "onnx" */
  int input_shape[3]; /* [channels, height, width] of one sample: [1, 28, 28] */
  int num_classes;    /* 10 */
  size_t hidden[FL_JOB_MAX_HIDDEN]; /* mlp and ctr's deep part: [256, 128, 100] */
  size_t n_hidden;
  char activation[8]; /* "relu" (default) or "tanh" */
  int conv_channels[2]; /* cnn: [32, 64] */
  int conv_kernel;    /* cnn: 5 (odd; padding keeps the size) */
  size_t fc_hidden;   /* cnn: hidden fc width after the convs, 0 = none (0) */
  fl_norm_kind norm;  /* cnn: none (default), bn or gn */
  int gn_groups;      /* 8; must divide both conv_channels when norm is gn */
  float bn_momentum;  /* 0.1 */
  float bn_epsilon;   /* 1e-5 */
  char plugin_path[FL_JOB_PATH_MAX]; /* plugin: the shared library (required) */
  char plugin_args[256];             /* plugin: free-form string for it ("") */
  char path[FL_JOB_PATH_MAX]; /* onnx: the model file (required) */
  char output[128];   /* onnx: the value the loss reads ("" = the graph's only output) */
  fl_loss_kind loss;  /* softmax_cross_entropy (default; the only one of the presets),
                         bce_with_logits or mse (onnx, float targets) */
  int64_t ignore_index; /* onnx with data.inputs: a class id the softmax loss and the
                           accuracy skip (-100, as nn.CrossEntropyLoss) */
  struct {
    int embedding_dim;    /* 8 */
    int sparse_slots;     /* sparse feature slots per sample: 26 */
    int dense_features;   /* dense features per sample: 13 */
    int64_t hash_buckets; /* feature ids are hashed into this many rows: 1000003 */
  } ctr;
} fl_job_model;

/* ------------------------------------------------------------------- data */
/* One named input of data.inputs: the model input and its .npy file. */
typedef struct fl_job_input {
  char name[FL_JOB_NAME_MAX];
  char path[FL_JOB_PATH_MAX];
} fl_job_input;

typedef struct fl_job_data {
  fl_data_format format;                  /* idx */
  char train_images[FL_JOB_PATH_MAX];     /* idx: Fashion-MNIST under /usr/share/datasets */
  char train_labels[FL_JOB_PATH_MAX];
  char test_images[FL_JOB_PATH_MAX];
  char test_labels[FL_JOB_PATH_MAX];
  char train_path[FL_JOB_PATH_MAX];       /* libsvm ("") */
  char test_path[FL_JOB_PATH_MAX];        /* libsvm ("" = no test set) */
  /* npy: features (n, ...) float32 or uint8, labels (n,) int64/int32 class
   * ids or (n, ...) float32 targets for bce/mse; fed as stored */
  char train_x[FL_JOB_PATH_MAX];          /* npy ("") */
  char train_y[FL_JOB_PATH_MAX];
  char test_x[FL_JOB_PATH_MAX];           /* npy ("", required with train.eval) */
  char test_y[FL_JOB_PATH_MAX];
  float scale; /* npy uint8 features are multiplied by it: 1/255 (ToTensor);
                  float32 features need it left at the default */
  /* npy with named inputs (kind onnx): {model input: file} for training and
   * test, replacing train_x / test_x; labels stay train_y / test_y */
  fl_job_input inputs[FL_JOB_MAX_INPUTS];
  size_t n_inputs;
  fl_job_input test_inputs[FL_JOB_MAX_INPUTS];
  size_t n_test_inputs;
  struct {
    fl_synth_kind kind;    /* image (default) or ctr */
    int64_t train_samples; /* 8192 */
    int64_t test_samples;  /* 2048 */
    uint64_t seed;         /* 1 */
  } synthetic;
  int64_t limit_train; /* use only the first N training samples, 0 = all */
  int64_t limit_test;  /* 0 = all */
  int prefetch;        /* batches read ahead by the reader thread: 4 (0 = none) */
  int shuffle;         /* per-epoch shuffle from train.seed: 1 */
  struct {             /* training images only (fl_augment in fl_data.h) */
    int hflip;         /* random_horizontal_flip: 0 */
    int crop_padding;  /* random_crop_padding: shift up to this many pixels: 0 */
  } augment;
  /* criteo (fl_criteo_options in trainer/fl_data.h): the files (globs
   * expanded in order; train_path / test_path name one file), and under
   * data.criteo the model inputs fed and the reader's options */
  char train_files[FL_JOB_MAX_LIST][FL_JOB_PATH_MAX];
  size_t n_train_files;
  char test_files[FL_JOB_MAX_LIST][FL_JOB_PATH_MAX];
  size_t n_test_files;
  char dense_input[FL_JOB_NAME_MAX];  /* float [B, 13] input: "dense" */
  char sparse_input[FL_JOB_NAME_MAX]; /* int64 [B, 26] input: "sparse" */
  int64_t shuffle_buffer; /* reservoir of N samples, 0 = file order: 100000 */
  int bad_lines;          /* 0 "stop" (default), 1 "skip" (counted, logged) */
  int64_t hash_buckets;   /* categorical ids modulo this, 0 = the 63-bit hash: 0 */
  /* validation (dense data): the last validation_split of the training set
   * held out before sharding (0 = none), or npy files of the test files'
   * form; train.validate_every says when it is evaluated */
  double validation_split;
  char validation_x[FL_JOB_PATH_MAX];
  char validation_y[FL_JOB_PATH_MAX];
  fl_job_input validation_inputs[FL_JOB_MAX_INPUTS]; /* with data.inputs */
  size_t n_validation_inputs;
} fl_job_data;

/* ---------------------------------------------------- optimizer (3 places) */
/* Used for `optimizer`, `pserver.optimizer` and `pserver.sparse.optimizer`. */
typedef struct fl_job_optimizer {
  /* The kernels' hyper-parameters, read into place (no copy between two
   * lists of the same fields): kind (key `name`: momentum by default;
   * lars/lamb are normalised away), momentum 0.9, nesterov 0, beta1 0.9,
   * beta2 0.999, epsilon (see the file comment: 1e-8, or 1e-6 under lamb),
   * weight_decay 0 (must be 0 under lars/lamb: their configs hold it),
   * initial_accumulator 0 (adagrad, rowwise_adagrad; ftrl: start of n),
   * l1, l2, beta 0 and lr_power -0.5 (ftrl).  lars_coeff, the exclude list
   * and the thread count are the strategy's (fl_job_optimizer_to_hparams). */
  fl_optim_hparams hp;
  float lr; /* base learning rate: 0.01 */
  /* grad_clip: the trainer's clipping of the gradient it applies or pushes
   * (optimizer only; refused under pserver.optimizer and its sparse one) */
  struct {
    fl_clip_kind kind; /* none (default), global_norm, value, norm */
    float max_norm;    /* global_norm, norm: required, > 0 */
    float clip_value;  /* value: required, > 0 */
    float norm_type;   /* global_norm, norm: 2; inf for the max norm */
  } grad_clip;
} fl_job_optimizer;

/* ------------------------------------------------------------ lr_schedule */
/* The evaluation result reduce-on-plateau watches. */
typedef enum fl_lr_metric {
  FL_LR_METRIC_LOSS = 0,
  FL_LR_METRIC_ACC1 = 1,
  FL_LR_METRIC_ACC5 = 2,
  FL_LR_METRIC_COUNT
} fl_lr_metric;
/* Their names, indexed by fl_lr_metric, NULL-terminated (lr_schedule.metric). */
extern const char *const fl_lr_metric_names[];

typedef struct fl_job_lr {
  fl_lr_kind kind;       /* constant (default); fl_lr_kind_names */
  int64_t warmup_steps;  /* linear warmup over this many optimizer steps: 0 */
  float warmup_start_lr; /* 0 */
  float end_lr;          /* polynomial/cosine: 0 */
  float power;           /* polynomial: 1 */
  int64_t decay_steps;   /* 0 = until the end of training (after warmup) */
  size_t n_boundaries;   /* piecewise: strictly increasing steps */
  int64_t boundaries[FL_LR_MAX_PIECES];
  size_t n_values;       /* piecewise: n_boundaries + 1 learning rates */
  float values[FL_LR_MAX_PIECES + 1];
  float gamma;           /* step, multistep, exponential: 0.1 */
  int64_t step_size;     /* step: required */
  size_t n_milestones;   /* multistep: strictly increasing steps, required */
  int64_t milestones[FL_LR_MAX_PIECES];
  float max_lr;          /* onecycle: 0 = optimizer.lr */
  int64_t total_steps;   /* onecycle: 0 = the training's steps */
  float pct_start;       /* onecycle: 0.3 */
  fl_lr_anneal anneal;   /* onecycle: cos (default), linear */
  float div_factor;      /* onecycle: 25 */
  float final_div_factor; /* onecycle: 1e4 */
  float start_factor;    /* linear: 1/3 */
  float end_factor;      /* linear: 1 */
  int64_t total_iters;   /* linear: 5; 0 = the training's steps (after warmup) */
  int mode_max;          /* plateau `mode`: min (default), max */
  float factor;          /* plateau: 0.1 */
  int64_t patience;      /* plateau: 10 evaluations */
  float threshold;       /* plateau: 1e-4 */
  int threshold_abs;     /* plateau `threshold_mode`: rel (default), abs */
  int64_t cooldown;      /* plateau: 0 */
  float min_lr;          /* plateau: 0 */
  fl_lr_metric metric;   /* plateau: the evaluation's loss (default), acc1, acc5 */
} fl_job_lr;

/* A validation metric (train.keep_best, train.early_stopping.metric);
 * its direction is its row in trainer/loop_valid.c. */
typedef enum fl_val_metric {
  FL_VAL_NONE = 0,
  FL_VAL_LOSS,
  FL_VAL_ACC1,
  FL_VAL_ACC5,
  FL_VAL_AUC,
  FL_VAL_LOGLOSS,
  FL_VAL_MSE,
  FL_VAL_MAE,
  FL_VAL_R2,
  FL_VAL_COUNT
} fl_val_metric;
/* Their names ("none", "val_loss", ...), indexed by fl_val_metric, NULL-terminated. */
extern const char *const fl_val_metric_names[];
struct fl_job;
/* Whether the job has a validation set (data.validation_split or files). */
int fl_job_has_validation(const struct fl_job *job);
/* Whether the job's data is sparse (CTR samples, read into a sparse
 * dataset): data.format libsvm, or synthetic kind ctr. */
int fl_job_sparse_data(const struct fl_job *job);

/* ------------------------------------------------------------------ train */
typedef struct fl_job_train {
  int epochs;             /* 10 */
  size_t batch_size;      /* per rank, per micro-batch: 64 */
  uint64_t seed;          /* parameter init, shuffle, dropout...: 1 */
  int eval;               /* evaluate on the test set each epoch: 1 */
  size_t eval_batch_size; /* 1000 */
  int log_interval;       /* log every N micro-batches: 100 */
  char checkpoint_dir[FL_JOB_PATH_MAX]; /* "" = no checkpoints */
  int64_t checkpoint_interval; /* optimizer steps; 0 = at each epoch end */
  int checkpoint_keep;    /* newest checkpoints kept: 3 */
  int num_threads;        /* CPU threads of kernels; 0 = all cores (0) */
  int64_t max_steps;      /* stop after N optimizer steps, 0 = no cap */
  char export_onnx[FL_JOB_PATH_MAX]; /* write the trained model as ONNX here at the
                                       end of training ("" = no export) */
  fl_train_device device; /* cpu (default) or gpu: where forward/backward run;
                             gpu needs a CUDA build and a GPU (else the trainer
                             exits 1); with strategy.amp its GEMMs run in
                             amp_configs.dtype */
  int64_t validate_every; /* validation every N optimizer steps, 0 = each epoch */
  fl_val_metric keep_best; /* keep the best validation's checkpoint: none */
  struct {
    fl_val_metric metric; /* none: never stop early */
    int64_t patience;     /* validations without improvement before stopping: 5 */
    double min_delta;     /* an improvement is by more than this: 0 */
  } early_stopping;
} fl_job_train;

/* ---------------------------------------------------------------- cluster */
typedef struct fl_job_cluster {
  fl_mode mode;                /* local (default) */
  double collective_timeout_s; /* 120 */
  double heartbeat_timeout_s;  /* 30 */
  double rpc_timeout_s;        /* per call: 30 */
  char token_file[FL_JOB_PATH_MAX]; /* "" (FLOTILLA_TOKEN / _FILE win) */
  struct {
    char cert[FL_JOB_PATH_MAX]; /* PEM; cert and key together, or neither */
    char key[FL_JOB_PATH_MAX];
    char ca[FL_JOB_PATH_MAX];   /* CA that signs the peers' certificates */
    int mutual;                 /* clients present certificates too: 0 */
  } tls;
  char metrics_addr[128]; /* "host:port" of /metrics, "" = off */
} fl_job_cluster;

/* ---------------------------------------------------------------- pserver */
#define FL_JOB_MAX_SPARSE_TABLES 64 /* the pservers hold 64 */

/* How a sparse table's rows start. */
typedef enum fl_job_sparse_init {
  FL_SPARSE_INIT_UNIFORM,    /* uniform in [-init_range, init_range] */
  FL_SPARSE_INIT_FROM_MODEL, /* rows 0..V-1 from the model's initializer, others uniform */
  FL_SPARSE_INIT_COUNT
} fl_job_sparse_init;

/* One of a model's initializers kept as a sparse table on the pservers
 * (pserver.sparse_tables: {NAME: {optimizer, lr, init, padding_id}}). */
typedef struct fl_job_sparse_table {
  char name[128];             /* the initializer, and the table's name on the pservers */
  fl_job_optimizer optimizer; /* default: pserver.sparse.optimizer */
  fl_job_sparse_init init;    /* default: uniform */
  float init_range;           /* uniform(r); default pserver.sparse.init_range */
  int has_padding;            /* padding_id given */
  int64_t padding_id;         /* reads as zeros, takes no update */
} fl_job_sparse_table;

typedef struct fl_job_pserver {
  fl_job_optimizer optimizer; /* dense tables; default: copy of `optimizer` */
  size_t dense_block_size;    /* floats per dense block: 262144 (1 MiB) */
  struct {
    fl_job_optimizer optimizer; /* sgd, adagrad (default, lr 0.05) or adam */
    float init_range;           /* rows start uniform in [-r, r]: 0.01 */
    int64_t max_rows;           /* per table per server; beyond: evict LRU: 1000000 */
    int pipeline; /* pull the next micro-batch's rows while one computes: 1 */
    int admit_threshold;        /* rows only for ids seen this often in training: 0 (all) */
    size_t admit_sketch_bytes;  /* memory of the counting sketch per table: 4 MiB */
    float admit_default;        /* what an id not admitted reads as: 0 */
    int64_t expire_after_steps; /* delete rows unseen this many table steps: 0 (never) */
    double expire_after_seconds; /* ... or this many seconds: 0 (never) */
  } sparse;
  fl_job_sparse_table sparse_tables[FL_JOB_MAX_SPARSE_TABLES]; /* a model's own tables */
  int n_sparse_tables;
  char checkpoint_dir[FL_JOB_PATH_MAX]; /* "" = no checkpoints */
  size_t memory_budget; /* bytes of sparse rows in memory, the rest on disk; 0 = all in memory */
  int64_t checkpoint_interval_steps;    /* 0 = not by steps */
  double checkpoint_interval_s;         /* 0 = not by time */
  struct {
    int64_t every; /* interval checkpoints are deltas, a whole base every N: 0 = off */
  } checkpoint_delta;
  char serving_export[FL_JOB_PATH_MAX]; /* each checkpoint's tables for serving: "" = off */
} fl_job_pserver;

/* --------------------------------------------------------------- strategy */
typedef struct fl_strategy {
  int a_sync; /* PS mode: 0 = sync (default), 1 = async / geo */
  struct { int k_steps; } a_sync_configs; /* > 0 with a_sync: geo every k steps (0) */

  int gradient_merge;
  struct {
    int k_steps; /* >= 1: 1 */
    int avg;     /* 1 */
  } gradient_merge_configs;

  int lars;
  struct {
    float lars_coeff;        /* 0.001 */
    float lars_weight_decay; /* 0.0005 */
    float epsilon;           /* 0 */
    char exclude_from_weight_decay[FL_JOB_MAX_LIST][FL_JOB_NAME_MAX];
    size_t n_exclude;
  } lars_configs;

  int lamb;
  struct {
    float lamb_weight_decay; /* 0.01 */
    char exclude_from_weight_decay[FL_JOB_MAX_LIST][FL_JOB_NAME_MAX];
    size_t n_exclude;
  } lamb_configs;

  int amp;
  struct {
    float init_loss_scaling;     /* 32768 */
    int incr_every_n_steps;      /* 1000 */
    int decr_every_n_nan_or_inf; /* 2 */
    float incr_ratio;            /* 2.0 */
    float decr_ratio;            /* 0.8 */
    int use_dynamic_loss_scaling; /* 1 */
    char custom_white_list[FL_JOB_MAX_LIST][FL_JOB_NAME_MAX]; /* op names */
    size_t n_white;
    char custom_black_list[FL_JOB_MAX_LIST][FL_JOB_NAME_MAX];
    size_t n_black;
    fl_amp_dtype dtype; /* float16 (default) or bfloat16 */
  } amp_configs;

  int recompute;
  struct {
    /* Segment boundaries by layer name; none = one segment per layer. */
    char checkpoints[FL_JOB_MAX_LIST][FL_JOB_NAME_MAX];
    size_t n_checkpoints;
  } recompute_configs;

  int fuse_all_reduce_ops;       /* 1 */
  int fuse_grad_size_in_MB;      /* 32; >= 1 */
  int fuse_grad_size_in_TFLOPS;  /* 50: max layers per bucket; >= 1 */
  int use_hierarchical_allreduce; /* 0 */
  int hierarchical_allreduce_inter_nranks; /* 0 = ranks per node from the cluster */
  int nccl_comm_num;             /* parallel rings / communicators: 1 (1..16) */
  fl_allreduce_algorithm allreduce_algorithm; /* auto: by the network probe's model */
  int sync_nccl_allreduce;       /* 1 */
  int sync_batch_norm;           /* 0 */
  fl_grad_compression grad_compression; /* none; fp16_allreduce: true = fp16 */
} fl_strategy;

/* elastic: a collective job whose world changes between rounds
 * (flotilla-run --rdzv_backend etcd) */
typedef struct fl_job_elastic {
  int keep_global_batch; /* 0: the LR scales with the world; 1: gradient
                          * merge k is raised to keep world x k (when it
                          * divides) */
} fl_job_elastic;

/* ------------------------------------------------------------------- job */
typedef struct fl_job {
  char source[FL_JOB_PATH_MAX]; /* file or name the job came from ("<defaults>") */
  fl_job_model model;
  fl_job_data data;
  fl_job_optimizer optimizer;
  fl_job_lr lr_schedule;
  fl_job_train train;
  fl_job_cluster cluster;
  fl_job_pserver pserver;
  fl_strategy strategy;
  fl_job_elastic elastic;
} fl_job;

/* Fill *job with every default above (and memset the rest to 0, so that two
 * jobs built the same way compare equal with memcmp). */
void fl_job_defaults(fl_job *job);

/* Parse the YAML job file at path into *job (defaults first, then the file,
 * then normalisation and the cross-field checks).  FL_EIO when the file
 * cannot be read, FL_EINVAL for a bad job (message: fl_job_last_error()).
 * On failure *job holds defaults plus whatever was parsed; don't use it.
 * Nothing to free: fl_job owns no heap memory. */
fl_status fl_job_load_file(const char *path, fl_job *job);

/* Same from a NUL-terminated YAML text; name (e.g. "<flag>", or a file name)
 * stands for the file in messages and is copied into job->source. */
fl_status fl_job_load_string(const char *text, const char *name, fl_job *job);

/* The message of this thread's last failed fl_job_load_* (a thread-local
 * buffer, "" when none); valid until the next call on this thread. */
const char *fl_job_last_error(void);

/* Validate an fl_job built in code (the same cross-field checks the loader
 * runs).  FL_EINVAL with a message naming the key path. */
fl_status fl_job_validate(const fl_job *job);

/* Write the resolved job as YAML to out (every key, defaults included).
 * FL_EIO when writing fails. */
fl_status fl_job_write_yaml(const fl_job *job, FILE *out);

/* Print the "DistributedStrategy Overview" box: one block per enabled
 * strategy with its configs (a_sync, gradient_merge, lars, lamb, amp,
 * recompute), then the enabled communication flags that apply to the mode. */
void fl_strategy_print_overview(const fl_job *job, FILE *out);

/* The effective optimizer of the trainer (local and collective modes):
 * job->optimizer, turned into FL_OPTIM_LARS by strategy.lars (lars_configs
 * give weight_decay, lars_coeff, epsilon) or FL_OPTIM_LAMB by strategy.lamb
 * (lamb_weight_decay), with num_threads from train.num_threads.  exclude is
 * caller storage of FL_JOB_MAX_LIST pointers; on return
 * out->exclude_from_weight_decay == exclude and its entries point into
 * job's strings, so job and exclude must outlive *out. */
fl_status fl_job_optim_hparams(const fl_job *job, fl_optim_hparams *out,
                               const char *exclude[FL_JOB_MAX_LIST]);

/* The same for the pserver's dense optimizer (pserver.optimizer with
 * strategy.lars / lamb applied) and its sparse optimizer (no lars/lamb). */
fl_status fl_job_pserver_hparams(const fl_job *job, fl_optim_hparams *dense,
                                 fl_optim_hparams *sparse, const char *exclude[FL_JOB_MAX_LIST]);

/* optimizer.grad_clip as the kernel's struct. */
fl_clip fl_job_grad_clip(const fl_job *job);

/* Plain conversion of one optimizer section (no strategy applied). */
void fl_job_optimizer_to_hparams(const fl_job_optimizer *o, int num_threads,
                                 fl_optim_hparams *out);

/* The learning-rate schedule: base_lr = optimizer.lr (pserver: pass
 * &job->pserver.optimizer via fl_job_lr_schedule_for; onecycle: max_lr
 * when given), decay_steps 0 (and onecycle's total_steps 0, linear's
 * total_iters 0) resolved to total_steps - warmup_steps (at least 1).
 * total_steps is the number of optimizer steps of the whole run.  FL_EINVAL
 * (logged, naming the keys) if the result is out of range (e.g. onecycle
 * phases shorter than a step). */
fl_status fl_job_lr_schedule(const fl_job *job, int64_t total_steps, fl_lr_schedule *out);
fl_status fl_job_lr_schedule_for(const fl_job *job, const fl_job_optimizer *o,
                                 int64_t total_steps, fl_lr_schedule *out);

/* The AMP loss scaler from strategy.amp_configs (valid whether amp is on or not). */
fl_loss_scaler fl_job_loss_scaler(const fl_job *job);

/* Gradient-merge steps in effect: gradient_merge_configs.k_steps when
 * gradient_merge is on, else 1. */
int fl_job_merge_steps(const fl_job *job);

#ifdef __cplusplus
}
#endif
#endif
