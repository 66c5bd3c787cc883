/* config.c - the job file parser and writer (see fl_config.h).
 *
 * One schema table per section drives everything: parsing (type and range
 * checks with the key's line and column), unknown-key detection, and the
 * YAML dump, so that the dump and the parser cannot drift apart.  libyaml's
 * document API gives us nodes with marks; we walk them along the schema and
 * stop at the first error, whose message is logged once and kept in a
 * thread-local buffer for fl_job_last_error(). */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config_int.h"
#include "fl_args.h"
#include "fl_config.h"
#include "fl_layers.h"
#include "fl_model_kind.h"
#include "fl_names.h"
#include "fl_log.h"
#include "fl_protocol.h"

/* Enums are stored through int pointers by the schema walker. */
_Static_assert(sizeof(fl_optim_kind) == sizeof(int) && sizeof(fl_lr_kind) == sizeof(int) &&
                   sizeof(fl_lr_anneal) == sizeof(int) && sizeof(fl_lr_metric) == sizeof(int) &&
                   sizeof(fl_clip_kind) == sizeof(int) &&
                   sizeof(fl_mode) == sizeof(int) && sizeof(fl_data_format) == sizeof(int) &&
                   sizeof(fl_grad_compression) == sizeof(int) &&
                   sizeof(fl_amp_dtype) == sizeof(int) &&
                   sizeof(fl_train_device) == sizeof(int) &&
                   sizeof(fl_val_metric) == sizeof(int) &&
                   sizeof(fl_synth_kind) == sizeof(int) &&
                   sizeof(fl_loss_kind) == sizeof(int) &&
                   sizeof(fl_norm_kind) == sizeof(int),
               "enum fields must be int-sized");

/* Bounds that keep a hostile job file cheap: libyaml holds every node of the
 * document (about 170 bytes per scalar) and its scanner spends time
 * proportional to the flow-collection nesting depth on every token, so
 * "[[[[...]]]]" costs quadratic time.  Flow depth is at most the number of
 * '[' and '{' characters, which is what is counted (a job file has a few
 * dozen at most). */
#define MAX_FILE_BYTES (1u << 20)
#define MAX_FLOW_OPENERS 256
#define MAX_FIELDS 96
#define PATH_BUF 192 /* longest key path kept, e.g. "strategy.amp_configs.x[3]" */

static _Thread_local char g_err[1024];

const char *fl_job_last_error(void) { return g_err; }

/* ------------------------------------------------------------ names */

static const char *const k_modes[] = {"local", "collective", "ps", NULL};
static const char *const k_formats[] = {"idx", "libsvm", "synthetic", "npy", "criteo", NULL};
static const char *const k_bad_lines[] = {"stop", "skip", NULL};
static const char *const k_anneal[] = {"cos", "linear", NULL};          /* fl_lr_anneal */
static const char *const k_plateau_modes[] = {"min", "max", NULL};      /* mode_max */
static const char *const k_threshold_modes[] = {"rel", "abs", NULL};    /* threshold_abs */
const char *const fl_lr_metric_names[] = {"loss", "acc1", "acc5", NULL};
const char *const fl_val_metric_names[] = {"none",    "val_loss", "val_acc1", "val_acc5",
                                           "val_auc", "val_logloss", "val_mse", "val_mae",
                                           "val_r2",  NULL};
_Static_assert(sizeof fl_val_metric_names / sizeof *fl_val_metric_names == FL_VAL_COUNT + 1,
               "one name per validation metric");
static const char *const k_compress[] = {"none", "fp16", "bf16", NULL};
/* In the order of fl_allreduce_algorithm. */
static const char *const k_ar_algos[] = {"auto", "ring", "halving_doubling", "tree",
                                         "hierarchical", NULL};
static const char *const k_amp_dtypes[] = {"float16", "bfloat16", NULL};
const char *const fl_train_device_names[] = {"cpu", "gpu", NULL};
static const char *const k_activations[] = {"relu", "tanh", NULL};
const char *const fl_norm_names[] = {"none", "bn", "gn", NULL};
const char *const fl_synth_kind_names[] = {"image", "ctr", NULL};
/* fl_job_sparse_init; "uniform" also takes an argument, "uniform(R)". */
static const char *const k_sparse_inits[] = {"uniform", "from_model", NULL};

/* Each enum's names, one per value and a NULL, checked against its COUNT. */
#define NAMES_OF(t, count) \
  _Static_assert(sizeof(t) / sizeof((t)[0]) == (size_t)(count) + 1, #t ": one name per value")
NAMES_OF(k_modes, FL_MODE_COUNT);
NAMES_OF(k_formats, FL_DATA_FORMAT_COUNT);
NAMES_OF(k_compress, FL_COMPRESS_COUNT);
NAMES_OF(k_ar_algos, FL_AR_COUNT);
NAMES_OF(k_amp_dtypes, FL_AMP_DTYPE_COUNT);
NAMES_OF(fl_train_device_names, FL_DEVICE_COUNT);
NAMES_OF(fl_lr_metric_names, FL_LR_METRIC_COUNT);
NAMES_OF(k_sparse_inits, FL_SPARSE_INIT_COUNT);
NAMES_OF(fl_synth_kind_names, FL_SYNTH_COUNT);
NAMES_OF(fl_norm_names, FL_NORM_COUNT);

const char *fl_mode_name(fl_mode mode) {
  if ((unsigned)mode < FL_MODE_COUNT) return k_modes[mode];
  return "?";
}

fl_status fl_mode_parse(const char *name, fl_mode *out) {
  const int i = fl_names_find(k_modes, name);
  if (i < 0) return FL_EINVAL;
  *out = (fl_mode)i;
  return FL_OK;
}

fl_status fl_norm_parse(const char *name, fl_norm_kind *out) {
  const int i = fl_names_find(fl_norm_names, name && *name ? name : fl_norm_names[FL_NORM_NONE]);
  if (i < 0) return FL_EINVAL;
  *out = (fl_norm_kind)i;
  return FL_OK;
}

const char *fl_cfg_optim_name(fl_optim_kind k) {
  if ((unsigned)k < FL_OPTIM_COUNT) return fl_optim_kind_names[k];
  return "?";
}

const char *fl_cfg_compress_name(fl_grad_compression c) {
  if ((unsigned)c < FL_COMPRESS_COUNT) return k_compress[c];
  return "?";
}

const char *fl_allreduce_algorithm_name(fl_allreduce_algorithm a) {
  if ((unsigned)a < FL_AR_COUNT) return k_ar_algos[a];
  return "?";
}

const char *fl_cfg_amp_dtype_name(fl_amp_dtype d) {
  if ((unsigned)d < FL_AMP_DTYPE_COUNT) return k_amp_dtypes[d];
  return "?";
}

/* ------------------------------------------------------------ schema */

typedef enum ftype {
  F_MAP,       /* a nested mapping: sub table, children at base + off */
  F_BOOL,      /* int 0/1 */
  F_INT,       /* int */
  F_I64,       /* int64_t */
  F_U64,       /* uint64_t */
  F_SIZE,      /* size_t */
  F_FLOAT,     /* float */
  F_DOUBLE,    /* double */
  F_STR,       /* char[cap] */
  F_CHOICE,    /* char[cap], one of choices */
  F_ENUM,      /* an int-sized enum, choices[value] */
  F_INT_ARRAY, /* exactly cap ints */
  F_SIZE_LIST, /* size_t[cap], count (size_t) at count_off */
  F_I64_LIST,  /* int64_t[cap] */
  F_FLOAT_LIST, /* float[cap] */
  F_STR_LIST,  /* char[cap][FL_JOB_NAME_MAX] */
  F_PATH_LIST, /* char[cap][FL_JOB_PATH_MAX]; a plain string is a list of one */
  F_FP16AR,    /* strategy.fp16_allreduce: folded into grad_compression */
  F_UNSUP_BOOL, /* not implemented: accepted only at dflt */
  F_UNSUP_NUM, /* not implemented number: accepted only at dflt */
  F_UNSUP_MAP, /* not implemented *_configs: accepted only empty */
  F_PATH_MAP,  /* {name: path}: fl_job_input[cap], count (size_t) at count_off */
  F_TABLE_MAP, /* {name: {sub}}: fl_job_sparse_table[cap], count (int) at count_off */
  F_SPARSE_INIT /* "uniform", "uniform(R)" or "from_model": a table's init, init_range */
} ftype;

/* The element of a list type (F_INT_ARRAY..F_PATH_LIST): its type, and
 * its size in bytes in *esz. */
static ftype list_elem(ftype list, size_t *esz) {
  static const struct {
    ftype elem;
    size_t size;
  } rows[] = {
      [F_INT_ARRAY - F_INT_ARRAY] = {F_INT, sizeof(int)},
      [F_SIZE_LIST - F_INT_ARRAY] = {F_SIZE, sizeof(size_t)},
      [F_I64_LIST - F_INT_ARRAY] = {F_I64, sizeof(int64_t)},
      [F_FLOAT_LIST - F_INT_ARRAY] = {F_FLOAT, sizeof(float)},
      [F_STR_LIST - F_INT_ARRAY] = {F_STR, FL_JOB_NAME_MAX},
      [F_PATH_LIST - F_INT_ARRAY] = {F_STR, FL_JOB_PATH_MAX},
  };
  _Static_assert(sizeof rows / sizeof rows[0] == F_PATH_LIST - F_INT_ARRAY + 1,
                 "one row per list type");
  const size_t i = (size_t)(list - F_INT_ARRAY);
  *esz = rows[i].size;
  return rows[i].elem;
}

/* LIM_INF: F_FLOAT also takes inf (or .inf), past the range check. */
enum { LIM_LO = 1, LIM_HI = 2, LIM_LOX = 4, LIM_HIX = 8, LIM_INF = 16 };

typedef struct field {
  const char *key;
  ftype type;
  size_t off;
  size_t cap;
  size_t count_off;
  double lo, hi;
  unsigned lim;
  const struct field *sub;
  const char *const *choices;
  /* The default, written here once: fl_job_defaults() applies the table.
   * Numbers, booleans and enum values in dflt; strings (F_STR, F_CHOICE) in
   * dstr; arrays and lists (F_INT_ARRAY, F_SIZE_LIST) in dlist[dn].  A field
   * without one is 0 / empty.  F_UNSUP_*: the only value accepted. */
  double dflt;
  const char *dstr;
  const double *dlist;
  size_t dn;
  /* F_MAP rows sharing a sub-table: defaults of this place that differ
   * from the sub-table's (key, value; key NULL ends). */
  const struct field_over *over;
} field;

typedef struct field_over {
  const char *key;
  double dflt;
} field_over;

#define E(k, ty, T, m, ...) {.key = (k), .type = (ty), .off = offsetof(T, m), __VA_ARGS__}
#define RANGE(a, b) .lo = (a), .hi = (b), .lim = LIM_LO | LIM_HI
#define MIN(a) .lo = (a), .lim = LIM_LO
#define MINX(a) .lo = (a), .lim = LIM_LO | LIM_LOX
#define STRCAP(T, m) .cap = sizeof(((T *)0)->m)
#define LIST(T, m, n) .cap = sizeof(((T *)0)->m) / sizeof(((T *)0)->m[0]), .count_off = offsetof(T, n)
#define UNSUP_B(k, d) {.key = (k), .type = F_UNSUP_BOOL, .dflt = (d)}
#define UNSUP_N(k, d) {.key = (k), .type = F_UNSUP_NUM, .dflt = (d)}
#define UNSUP_M(k) {.key = (k), .type = F_UNSUP_MAP}
#define END {.key = NULL}
#define DEF(v) .dflt = (v)
#define DEFS(v) .dstr = (v)
#define DEFL(...) .dlist = (const double[]){__VA_ARGS__}, \
    .dn = sizeof((const double[]){__VA_ARGS__}) / sizeof(double)

#define FMNIST "/usr/share/datasets/fashion-mnist/"
/* optimizer.hp.epsilon: Adam-family and Adagrad; LAMB's is 1e-6 (docs/DESIGN.md
 * 5), applied once the file says whether it is LAMB. */
#define OPTIM_EPS 1e-8

static const field f_model[] = {
    E("kind", F_CHOICE, fl_job_model, kind, STRCAP(fl_job_model, kind), .choices = fl_model_kind_names,
      DEFS("mlp")),
    E("input_shape", F_INT_ARRAY, fl_job_model, input_shape, .cap = 3, RANGE(1, 65536),
      DEFL(1, 28, 28)),
    E("num_classes", F_INT, fl_job_model, num_classes, RANGE(2, 1e6), DEF(10)),
    E("hidden", F_SIZE_LIST, fl_job_model, hidden, LIST(fl_job_model, hidden, n_hidden),
      RANGE(1, 1 << 24), DEFL(256, 128, 100)),
    E("activation", F_CHOICE, fl_job_model, activation, STRCAP(fl_job_model, activation),
      .choices = k_activations, DEFS("relu")),
    E("conv_channels", F_INT_ARRAY, fl_job_model, conv_channels, .cap = 2, RANGE(1, 4096),
      DEFL(32, 64)),
    E("conv_kernel", F_INT, fl_job_model, conv_kernel, RANGE(1, 15), DEF(5)),
    E("fc_hidden", F_SIZE, fl_job_model, fc_hidden, RANGE(0, 1 << 24)),
    E("norm", F_ENUM, fl_job_model, norm, .choices = fl_norm_names, DEF(FL_NORM_NONE)),
    E("gn_groups", F_INT, fl_job_model, gn_groups, RANGE(1, 4096), DEF(8)),
    E("bn_momentum", F_FLOAT, fl_job_model, bn_momentum, RANGE(0, 1), DEF(0.1)),
    E("bn_epsilon", F_FLOAT, fl_job_model, bn_epsilon, MINX(0), DEF(1e-5)),
    E("plugin_path", F_STR, fl_job_model, plugin_path, STRCAP(fl_job_model, plugin_path)),
    E("plugin_args", F_STR, fl_job_model, plugin_args, STRCAP(fl_job_model, plugin_args)),
    E("path", F_STR, fl_job_model, path, STRCAP(fl_job_model, path)),
    E("output", F_STR, fl_job_model, output, STRCAP(fl_job_model, output)),
    E("loss", F_ENUM, fl_job_model, loss, .choices = fl_loss_names, DEF(FL_LOSS_SOFTMAX_XENT)),
    E("ignore_index", F_I64, fl_job_model, ignore_index, RANGE(-2147483648.0, 2147483647.0),
      DEF(-100)),
    {.key = "ctr",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("embedding_dim", F_INT, fl_job_model, ctr.embedding_dim, RANGE(1, 4096), DEF(8)),
         E("sparse_slots", F_INT, fl_job_model, ctr.sparse_slots, RANGE(1, 1024), DEF(26)),
         E("dense_features", F_INT, fl_job_model, ctr.dense_features, RANGE(0, 4096), DEF(13)),
         E("hash_buckets", F_I64, fl_job_model, ctr.hash_buckets, RANGE(1, 1e12), DEF(1000003)),
         END}},
    END};

static const field f_data[] = {
    E("format", F_ENUM, fl_job_data, format, .choices = k_formats, DEF(FL_DATA_IDX)),
    E("train_images", F_STR, fl_job_data, train_images, STRCAP(fl_job_data, train_images),
      DEFS(FMNIST "train-images-idx3-ubyte.gz")),
    E("train_labels", F_STR, fl_job_data, train_labels, STRCAP(fl_job_data, train_labels),
      DEFS(FMNIST "train-labels-idx1-ubyte.gz")),
    E("test_images", F_STR, fl_job_data, test_images, STRCAP(fl_job_data, test_images),
      DEFS(FMNIST "t10k-images-idx3-ubyte.gz")),
    E("test_labels", F_STR, fl_job_data, test_labels, STRCAP(fl_job_data, test_labels),
      DEFS(FMNIST "t10k-labels-idx1-ubyte.gz")),
    E("train_path", F_STR, fl_job_data, train_path, STRCAP(fl_job_data, train_path)),
    E("test_path", F_STR, fl_job_data, test_path, STRCAP(fl_job_data, test_path)),
    E("train_x", F_STR, fl_job_data, train_x, STRCAP(fl_job_data, train_x)),
    E("train_y", F_STR, fl_job_data, train_y, STRCAP(fl_job_data, train_y)),
    E("test_x", F_STR, fl_job_data, test_x, STRCAP(fl_job_data, test_x)),
    E("test_y", F_STR, fl_job_data, test_y, STRCAP(fl_job_data, test_y)),
    E("scale", F_FLOAT, fl_job_data, scale, MINX(0), DEF(1.0f / 255.0f)),
    E("inputs", F_PATH_MAP, fl_job_data, inputs, .cap = FL_JOB_MAX_INPUTS,
      .count_off = offsetof(fl_job_data, n_inputs)),
    E("test_inputs", F_PATH_MAP, fl_job_data, test_inputs, .cap = FL_JOB_MAX_INPUTS,
      .count_off = offsetof(fl_job_data, n_test_inputs)),
    {.key = "synthetic",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("kind", F_ENUM, fl_job_data, synthetic.kind, .choices = fl_synth_kind_names,
           DEF(FL_SYNTH_IMAGE)),
         E("train_samples", F_I64, fl_job_data, synthetic.train_samples, RANGE(1, 1e9), DEF(8192)),
         E("test_samples", F_I64, fl_job_data, synthetic.test_samples, RANGE(0, 1e9), DEF(2048)),
         E("seed", F_U64, fl_job_data, synthetic.seed, DEF(1)),
         END}},
    E("limit_train", F_I64, fl_job_data, limit_train, MIN(0)),
    E("limit_test", F_I64, fl_job_data, limit_test, MIN(0)),
    E("prefetch", F_INT, fl_job_data, prefetch, RANGE(0, 1024), DEF(4)),
    E("shuffle", F_BOOL, fl_job_data, shuffle, DEF(1)),
    {.key = "augment",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("random_horizontal_flip", F_BOOL, fl_job_data, augment.hflip),
         E("random_crop_padding", F_INT, fl_job_data, augment.crop_padding, RANGE(0, 1024)),
         END}},
    E("train_files", F_PATH_LIST, fl_job_data, train_files,
      LIST(fl_job_data, train_files, n_train_files)),
    E("test_files", F_PATH_LIST, fl_job_data, test_files,
      LIST(fl_job_data, test_files, n_test_files)),
    {.key = "criteo",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("dense_input", F_STR, fl_job_data, dense_input, STRCAP(fl_job_data, dense_input),
           DEFS("dense")),
         E("sparse_input", F_STR, fl_job_data, sparse_input, STRCAP(fl_job_data, sparse_input),
           DEFS("sparse")),
         E("shuffle_buffer", F_I64, fl_job_data, shuffle_buffer, RANGE(0, 1e8), DEF(100000)),
         E("bad_lines", F_ENUM, fl_job_data, bad_lines, .choices = k_bad_lines, DEF(0)),
         E("hash_buckets", F_I64, fl_job_data, hash_buckets, RANGE(0, 1e15)),
         END}},
    E("validation_split", F_DOUBLE, fl_job_data, validation_split, .lo = 0, .hi = 1,
      .lim = LIM_LO | LIM_HI | LIM_HIX),
    E("validation_x", F_STR, fl_job_data, validation_x, STRCAP(fl_job_data, validation_x)),
    E("validation_y", F_STR, fl_job_data, validation_y, STRCAP(fl_job_data, validation_y)),
    E("validation_inputs", F_PATH_MAP, fl_job_data, validation_inputs, .cap = FL_JOB_MAX_INPUTS,
      .count_off = offsetof(fl_job_data, n_validation_inputs)),
    END};

static const field f_optimizer[] = {
    E("name", F_ENUM, fl_job_optimizer, hp.kind, .choices = fl_optim_kind_names,
      DEF(FL_OPTIM_MOMENTUM)),
    E("lr", F_FLOAT, fl_job_optimizer, lr, MIN(0), DEF(0.01)),
    E("momentum", F_FLOAT, fl_job_optimizer, hp.momentum, RANGE(0, 1), DEF(0.9)),
    E("nesterov", F_BOOL, fl_job_optimizer, hp.nesterov),
    E("beta1", F_FLOAT, fl_job_optimizer, hp.beta1, .lo = 0, .hi = 1, .lim = LIM_LO | LIM_HI | LIM_HIX,
      DEF(0.9)),
    E("beta2", F_FLOAT, fl_job_optimizer, hp.beta2, .lo = 0, .hi = 1, .lim = LIM_LO | LIM_HI | LIM_HIX,
      DEF(0.999)),
    E("epsilon", F_FLOAT, fl_job_optimizer, hp.epsilon, MIN(0), DEF(OPTIM_EPS)),
    E("weight_decay", F_FLOAT, fl_job_optimizer, hp.weight_decay, MIN(0)),
    E("initial_accumulator", F_FLOAT, fl_job_optimizer, hp.initial_accumulator, MIN(0)),
    E("l1", F_FLOAT, fl_job_optimizer, hp.l1, MIN(0)),
    E("l2", F_FLOAT, fl_job_optimizer, hp.l2, MIN(0)),
    E("beta", F_FLOAT, fl_job_optimizer, hp.beta, MIN(0)),
    E("lr_power", F_FLOAT, fl_job_optimizer, hp.lr_power, .hi = 0, .lim = LIM_HI, DEF(-0.5)),
    {.key = "grad_clip",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("kind", F_ENUM, fl_job_optimizer, grad_clip.kind, .choices = fl_clip_kind_names,
           DEF(FL_CLIP_NONE)),
         E("max_norm", F_FLOAT, fl_job_optimizer, grad_clip.max_norm, MIN(0)),
         E("clip_value", F_FLOAT, fl_job_optimizer, grad_clip.clip_value, MIN(0)),
         E("norm_type", F_FLOAT, fl_job_optimizer, grad_clip.norm_type, .lo = 0,
           .lim = LIM_LO | LIM_LOX | LIM_INF, DEF(2)),
         END}},
    END};

static const field f_lr[] = {
    E("kind", F_ENUM, fl_job_lr, kind, .choices = fl_lr_kind_names, DEF(FL_LR_CONSTANT)),
    E("warmup_steps", F_I64, fl_job_lr, warmup_steps, MIN(0)),
    E("warmup_start_lr", F_FLOAT, fl_job_lr, warmup_start_lr, MIN(0)),
    E("end_lr", F_FLOAT, fl_job_lr, end_lr, MIN(0)),
    E("power", F_FLOAT, fl_job_lr, power, MINX(0), DEF(1)),
    E("decay_steps", F_I64, fl_job_lr, decay_steps, MIN(0)),
    E("boundaries", F_I64_LIST, fl_job_lr, boundaries, LIST(fl_job_lr, boundaries, n_boundaries),
      MIN(1)),
    E("values", F_FLOAT_LIST, fl_job_lr, values, LIST(fl_job_lr, values, n_values), MIN(0)),
    E("gamma", F_FLOAT, fl_job_lr, gamma, .lo = 0, .hi = 1, .lim = LIM_LO | LIM_LOX | LIM_HI,
      DEF(0.1)),
    E("step_size", F_I64, fl_job_lr, step_size, MIN(0)),
    E("milestones", F_I64_LIST, fl_job_lr, milestones, LIST(fl_job_lr, milestones, n_milestones),
      MIN(1)),
    E("max_lr", F_FLOAT, fl_job_lr, max_lr, MIN(0)),
    E("total_steps", F_I64, fl_job_lr, total_steps, MIN(0)),
    E("pct_start", F_FLOAT, fl_job_lr, pct_start, .lo = 0, .hi = 1,
      .lim = LIM_LO | LIM_LOX | LIM_HI | LIM_HIX, DEF(0.3)),
    E("anneal", F_ENUM, fl_job_lr, anneal, .choices = k_anneal, DEF(FL_LR_ANNEAL_COS)),
    E("div_factor", F_FLOAT, fl_job_lr, div_factor, MINX(0), DEF(25)),
    E("final_div_factor", F_FLOAT, fl_job_lr, final_div_factor, MINX(0), DEF(1e4)),
    E("start_factor", F_FLOAT, fl_job_lr, start_factor, .lo = 0, .hi = 1,
      .lim = LIM_LO | LIM_LOX | LIM_HI, DEF(1.0 / 3.0)),
    E("end_factor", F_FLOAT, fl_job_lr, end_factor, RANGE(0, 1), DEF(1)),
    E("total_iters", F_I64, fl_job_lr, total_iters, MIN(0), DEF(5)),
    E("mode", F_ENUM, fl_job_lr, mode_max, .choices = k_plateau_modes),
    E("factor", F_FLOAT, fl_job_lr, factor, .lo = 0, .hi = 1,
      .lim = LIM_LO | LIM_LOX | LIM_HI | LIM_HIX, DEF(0.1)),
    E("patience", F_I64, fl_job_lr, patience, MIN(0), DEF(10)),
    E("threshold", F_FLOAT, fl_job_lr, threshold, MIN(0), DEF(1e-4)),
    E("threshold_mode", F_ENUM, fl_job_lr, threshold_abs, .choices = k_threshold_modes),
    E("cooldown", F_I64, fl_job_lr, cooldown, MIN(0)),
    E("min_lr", F_FLOAT, fl_job_lr, min_lr, MIN(0)),
    E("metric", F_ENUM, fl_job_lr, metric, .choices = fl_lr_metric_names),
    END};

static const field f_train[] = {
    E("epochs", F_INT, fl_job_train, epochs, RANGE(1, 1e6), DEF(10)),
    E("batch_size", F_SIZE, fl_job_train, batch_size, RANGE(1, 1 << 20), DEF(64)),
    E("seed", F_U64, fl_job_train, seed, DEF(1)),
    E("eval", F_BOOL, fl_job_train, eval, DEF(1)),
    E("eval_batch_size", F_SIZE, fl_job_train, eval_batch_size, RANGE(1, 1 << 20), DEF(1000)),
    E("log_interval", F_INT, fl_job_train, log_interval, RANGE(1, 1e9), DEF(100)),
    E("checkpoint_dir", F_STR, fl_job_train, checkpoint_dir, STRCAP(fl_job_train, checkpoint_dir)),
    E("checkpoint_interval", F_I64, fl_job_train, checkpoint_interval, MIN(0)),
    E("checkpoint_keep", F_INT, fl_job_train, checkpoint_keep, RANGE(1, 1000), DEF(3)),
    E("num_threads", F_INT, fl_job_train, num_threads, RANGE(0, 1024)),
    E("max_steps", F_I64, fl_job_train, max_steps, MIN(0)),
    E("device", F_ENUM, fl_job_train, device, .choices = fl_train_device_names),
    E("export_onnx", F_STR, fl_job_train, export_onnx, STRCAP(fl_job_train, export_onnx)),
    E("validate_every", F_I64, fl_job_train, validate_every, MIN(0)),
    E("keep_best", F_ENUM, fl_job_train, keep_best, .choices = fl_val_metric_names),
    {.key = "early_stopping",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("metric", F_ENUM, fl_job_train, early_stopping.metric, .choices = fl_val_metric_names),
         E("patience", F_I64, fl_job_train, early_stopping.patience, MIN(1), DEF(5)),
         E("min_delta", F_DOUBLE, fl_job_train, early_stopping.min_delta, MIN(0)),
         END}},
    END};

static const field f_cluster[] = {
    E("mode", F_ENUM, fl_job_cluster, mode, .choices = k_modes, DEF(FL_MODE_LOCAL)),
    E("collective_timeout_s", F_DOUBLE, fl_job_cluster, collective_timeout_s, .lo = 0,
      .hi = 1e6, .lim = LIM_LO | LIM_LOX | LIM_HI, DEF(120)),
    E("heartbeat_timeout_s", F_DOUBLE, fl_job_cluster, heartbeat_timeout_s, .lo = 0, .hi = 1e6,
      .lim = LIM_LO | LIM_LOX | LIM_HI, DEF(30)),
    E("rpc_timeout_s", F_DOUBLE, fl_job_cluster, rpc_timeout_s, .lo = 0, .hi = 1e6,
      .lim = LIM_LO | LIM_LOX | LIM_HI, DEF(30)),
    E("token_file", F_STR, fl_job_cluster, token_file, STRCAP(fl_job_cluster, token_file)),
    {.key = "tls",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("cert", F_STR, fl_job_cluster, tls.cert, STRCAP(fl_job_cluster, tls.cert)),
         E("key", F_STR, fl_job_cluster, tls.key, STRCAP(fl_job_cluster, tls.key)),
         E("ca", F_STR, fl_job_cluster, tls.ca, STRCAP(fl_job_cluster, tls.ca)),
         E("mutual", F_BOOL, fl_job_cluster, tls.mutual),
         END}},
    E("metrics_addr", F_STR, fl_job_cluster, metrics_addr, STRCAP(fl_job_cluster, metrics_addr)),
    END};

/* One entry of pserver.sparse_tables (its key is the table's name).  An
 * entry's optimizer map starts from pserver.sparse.optimizer's defaults;
 * an entry without one takes pserver.sparse.optimizer (normalise).
 * padding_id -1: none. */
static const field f_sparse_table[] = {
    E("optimizer", F_MAP, fl_job_sparse_table, optimizer, .sub = f_optimizer,
      .over = (const field_over[]){{"name", FL_OPTIM_ADAGRAD}, {"lr", 0.05}, {NULL, 0}}),
    {.key = "init", .type = F_SPARSE_INIT},
    E("padding_id", F_I64, fl_job_sparse_table, padding_id, MIN(-1), DEF(-1)),
    END};

static const field f_pserver[] = {
    E("optimizer", F_MAP, fl_job_pserver, optimizer, .sub = f_optimizer),
    E("dense_block_size", F_SIZE, fl_job_pserver, dense_block_size, RANGE(1, 1 << 28), DEF(262144)),
    {.key = "sparse",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("optimizer", F_MAP, fl_job_pserver, sparse.optimizer, .sub = f_optimizer,
           .over = (const field_over[]){{"name", FL_OPTIM_ADAGRAD}, {"lr", 0.05}, {NULL, 0}}),
         E("init_range", F_FLOAT, fl_job_pserver, sparse.init_range, RANGE(0, 1e3), DEF(0.01)),
         E("max_rows", F_I64, fl_job_pserver, sparse.max_rows, RANGE(1, 1e12), DEF(1000000)),
         E("pipeline", F_BOOL, fl_job_pserver, sparse.pipeline, DEF(1)),
         E("admit_threshold", F_INT, fl_job_pserver, sparse.admit_threshold, RANGE(0, 65535)),
         E("admit_sketch_bytes", F_SIZE, fl_job_pserver, sparse.admit_sketch_bytes,
           RANGE(1024, 1e10), DEF(4194304)),
         E("admit_default", F_FLOAT, fl_job_pserver, sparse.admit_default, RANGE(-1e6, 1e6)),
         E("expire_after_steps", F_I64, fl_job_pserver, sparse.expire_after_steps, MIN(0)),
         E("expire_after_seconds", F_DOUBLE, fl_job_pserver, sparse.expire_after_seconds,
           RANGE(0, 1e10)),
         END}},
    E("sparse_tables", F_TABLE_MAP, fl_job_pserver, sparse_tables,
      .cap = FL_JOB_MAX_SPARSE_TABLES, .count_off = offsetof(fl_job_pserver, n_sparse_tables),
      .sub = f_sparse_table),
    E("checkpoint_dir", F_STR, fl_job_pserver, checkpoint_dir,
      STRCAP(fl_job_pserver, checkpoint_dir)),
    E("memory_budget", F_SIZE, fl_job_pserver, memory_budget, RANGE(0, 1e15)),
    E("checkpoint_interval_steps", F_I64, fl_job_pserver, checkpoint_interval_steps, MIN(0)),
    E("checkpoint_interval_s", F_DOUBLE, fl_job_pserver, checkpoint_interval_s, RANGE(0, 1e9)),
    {.key = "checkpoint_delta",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){E("every", F_I64, fl_job_pserver, checkpoint_delta.every, MIN(0)),
                            END}},
    E("serving_export", F_STR, fl_job_pserver, serving_export,
      STRCAP(fl_job_pserver, serving_export)),
    END};

/* Paddle's DistributedStrategy, with its BuildStrategy / ExecutionStrategy
 * sub-tables.  Entries marked UNSUP are Paddle knobs Flotilla does not
 * implement: a job may name them, but only at Paddle's default. */
static const field f_strategy[] = {
    E("a_sync", F_BOOL, fl_strategy, a_sync),
    {.key = "a_sync_configs",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("k_steps", F_INT, fl_strategy, a_sync_configs.k_steps, RANGE(0, 1e6)),
         UNSUP_N("max_merge_var_num", 1),
         UNSUP_N("send_queue_size", 16),
         UNSUP_B("independent_recv_thread", 0),
         UNSUP_N("min_send_grad_num_before_recv", 1),
         UNSUP_N("thread_pool_size", 1),
         UNSUP_N("send_wait_times", 1),
         UNSUP_B("runtime_split_send_recv", 0),
         UNSUP_B("launch_barrier", 1),
         UNSUP_N("lr_decay_steps", 10),
         UNSUP_N("use_ps_gpu", 0),
         END}},
    E("gradient_merge", F_BOOL, fl_strategy, gradient_merge),
    {.key = "gradient_merge_configs",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("k_steps", F_INT, fl_strategy, gradient_merge_configs.k_steps, MIN(1), DEF(1)),
         E("avg", F_BOOL, fl_strategy, gradient_merge_configs.avg, DEF(1)),
         END}},
    E("lars", F_BOOL, fl_strategy, lars),
    {.key = "lars_configs",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("lars_coeff", F_FLOAT, fl_strategy, lars_configs.lars_coeff, MINX(0), DEF(0.001)),
         E("lars_weight_decay", F_FLOAT, fl_strategy, lars_configs.lars_weight_decay, MIN(0),
           DEF(0.0005)),
         E("epsilon", F_FLOAT, fl_strategy, lars_configs.epsilon, MIN(0)),
         E("exclude_from_weight_decay", F_STR_LIST, fl_strategy,
           lars_configs.exclude_from_weight_decay,
           LIST(fl_strategy, lars_configs.exclude_from_weight_decay, lars_configs.n_exclude)),
         END}},
    E("lamb", F_BOOL, fl_strategy, lamb),
    {.key = "lamb_configs",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("lamb_weight_decay", F_FLOAT, fl_strategy, lamb_configs.lamb_weight_decay, MIN(0),
           DEF(0.01)),
         E("exclude_from_weight_decay", F_STR_LIST, fl_strategy,
           lamb_configs.exclude_from_weight_decay,
           LIST(fl_strategy, lamb_configs.exclude_from_weight_decay, lamb_configs.n_exclude)),
         END}},
    E("amp", F_BOOL, fl_strategy, amp),
    {.key = "amp_configs",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("init_loss_scaling", F_FLOAT, fl_strategy, amp_configs.init_loss_scaling,
           RANGE(1, 1e30), DEF(32768)),
         E("incr_every_n_steps", F_INT, fl_strategy, amp_configs.incr_every_n_steps,
           RANGE(1, 1e9), DEF(1000)),
         E("decr_every_n_nan_or_inf", F_INT, fl_strategy, amp_configs.decr_every_n_nan_or_inf,
           RANGE(1, 1e9), DEF(2)),
         E("incr_ratio", F_FLOAT, fl_strategy, amp_configs.incr_ratio, .lo = 1, .hi = 1e6,
           .lim = LIM_LO | LIM_LOX | LIM_HI, DEF(2)),
         E("decr_ratio", F_FLOAT, fl_strategy, amp_configs.decr_ratio, .lo = 0, .hi = 1,
           .lim = LIM_LO | LIM_LOX | LIM_HI | LIM_HIX, DEF(0.8)),
         E("use_dynamic_loss_scaling", F_BOOL, fl_strategy, amp_configs.use_dynamic_loss_scaling,
           DEF(1)),
         E("custom_white_list", F_STR_LIST, fl_strategy, amp_configs.custom_white_list,
           LIST(fl_strategy, amp_configs.custom_white_list, amp_configs.n_white)),
         E("custom_black_list", F_STR_LIST, fl_strategy, amp_configs.custom_black_list,
           LIST(fl_strategy, amp_configs.custom_black_list, amp_configs.n_black)),
         E("dtype", F_ENUM, fl_strategy, amp_configs.dtype, .choices = k_amp_dtypes,
           DEF(FL_AMP_FLOAT16)),
         UNSUP_B("use_pure_fp16", 0),
         UNSUP_B("use_fp16_guard", 1),
         END}},
    E("recompute", F_BOOL, fl_strategy, recompute),
    {.key = "recompute_configs",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         E("checkpoints", F_STR_LIST, fl_strategy, recompute_configs.checkpoints,
           LIST(fl_strategy, recompute_configs.checkpoints, recompute_configs.n_checkpoints)),
         UNSUP_B("enable_offload", 0),
         END}},
    E("fuse_all_reduce_ops", F_BOOL, fl_strategy, fuse_all_reduce_ops, DEF(1)),
    E("fuse_grad_size_in_MB", F_INT, fl_strategy, fuse_grad_size_in_MB, RANGE(1, 65536), DEF(32)),
    E("fuse_grad_size_in_TFLOPS", F_INT, fl_strategy, fuse_grad_size_in_TFLOPS, RANGE(1, 1e6),
      DEF(50)),
    E("use_hierarchical_allreduce", F_BOOL, fl_strategy, use_hierarchical_allreduce),
    E("hierarchical_allreduce_inter_nranks", F_INT, fl_strategy,
      hierarchical_allreduce_inter_nranks, RANGE(0, 4096)),
    E("nccl_comm_num", F_INT, fl_strategy, nccl_comm_num, RANGE(1, 16), DEF(1)),
    E("allreduce_algorithm", F_ENUM, fl_strategy, allreduce_algorithm, .choices = k_ar_algos),
    E("sync_nccl_allreduce", F_BOOL, fl_strategy, sync_nccl_allreduce, DEF(1)),
    E("sync_batch_norm", F_BOOL, fl_strategy, sync_batch_norm),
    E("grad_compression", F_ENUM, fl_strategy, grad_compression, .choices = k_compress),
    {.key = "fp16_allreduce", .type = F_FP16AR},
    UNSUP_B("auto", 0),
    UNSUP_B("semi_auto", 0),
    UNSUP_B("dgc", 0),
    UNSUP_M("dgc_configs"),
    UNSUP_B("localsgd", 0),
    UNSUP_M("localsgd_configs"),
    UNSUP_B("adaptive_localsgd", 0),
    UNSUP_M("adaptive_localsgd_configs"),
    UNSUP_B("pipeline", 0),
    UNSUP_M("pipeline_configs"),
    UNSUP_B("sharding", 0),
    UNSUP_M("sharding_configs"),
    UNSUP_B("tensor_parallel", 0),
    UNSUP_M("tensor_parallel_configs"),
    UNSUP_M("hybrid_configs"),
    UNSUP_B("elastic", 0),
    UNSUP_B("qat", 0),
    UNSUP_M("qat_configs"),
    UNSUP_B("asp", 0),
    UNSUP_B("heter_ccl_mode", 0),
    UNSUP_B("find_unused_parameters", 0),
    UNSUP_B("without_graph_optimization", 0),
    UNSUP_B("fuse_grad_merge", 0),
    UNSUP_B("calc_comm_same_stream", 0),
    UNSUP_N("last_comm_group_size_MB", 1),
    UNSUP_M("gradient_scale_configs"),
    UNSUP_B("cudnn_exhaustive_search", 1),
    UNSUP_N("conv_workspace_size_limit", 4000),
    UNSUP_B("cudnn_batchnorm_spatial_persistent", 1),
    {.key = "build_strategy",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         UNSUP_B("enable_sequential_execution", 0),
         UNSUP_B("fuse_elewise_add_act_ops", 0),
         UNSUP_B("fuse_bn_act_ops", 0),
         UNSUP_B("fuse_relu_depthwise_conv", 0),
         UNSUP_B("fuse_broadcast_ops", 0),
         UNSUP_B("fuse_all_optimizer_ops", 0),
         UNSUP_B("enable_inplace", 0),
         UNSUP_B("enable_backward_optimizer_op_deps", 1),
         UNSUP_B("cache_runtime_context", 0),
         END}},
    {.key = "execution_strategy",
     .type = F_MAP,
     .off = 0,
     .sub = (const field[]){
         UNSUP_N("num_threads", 1),
         UNSUP_N("num_iteration_per_drop_scope", 10),
         UNSUP_N("num_iteration_per_run", 3),
         UNSUP_B("use_thread_barrier", 0),
         END}},
    END};

static const field f_elastic[] = {
    E("keep_global_batch", F_BOOL, fl_job_elastic, keep_global_batch, DEF(0)),
    END};

static const field f_job[] = {
    E("model", F_MAP, fl_job, model, .sub = f_model),
    E("data", F_MAP, fl_job, data, .sub = f_data),
    E("optimizer", F_MAP, fl_job, optimizer, .sub = f_optimizer),
    E("lr_schedule", F_MAP, fl_job, lr_schedule, .sub = f_lr),
    E("train", F_MAP, fl_job, train, .sub = f_train),
    E("cluster", F_MAP, fl_job, cluster, .sub = f_cluster),
    E("pserver", F_MAP, fl_job, pserver, .sub = f_pserver),
    E("strategy", F_MAP, fl_job, strategy, .sub = f_strategy),
    E("elastic", F_MAP, fl_job, elastic, .sub = f_elastic),
    END};

/* ------------------------------------------------------------ defaults */

static void set_str(char *dst, size_t cap, const char *src) {
  memset(dst, 0, cap);
  strncpy(dst, src, cap - 1);
}
#define SET_STR(dst, src) set_str((dst), sizeof(dst), (src))

/* optimizer.hp.epsilon when the file leaves it out (see OPTIM_EPS). */
static float eps_default(int lamb) { return lamb ? 1e-6f : (float)OPTIM_EPS; }

/* Store number x into a field of type t. */
static void put_default(ftype t, void *dst, double x) {
  switch (t) {
  case F_BOOL:
  case F_INT:
  case F_ENUM: *(int *)dst = (int)x; break;
  case F_I64: *(int64_t *)dst = (int64_t)x; break;
  case F_U64: *(uint64_t *)dst = (uint64_t)x; break;
  case F_SIZE: *(size_t *)dst = (size_t)x; break;
  case F_FLOAT: *(float *)dst = (float)x; break;
  case F_DOUBLE: *(double *)dst = x; break;
  default: break;
  }
}

/* The defaults of table t (and its sub-tables) into the struct at base. */
static void apply_defaults(const field *t, char *base) {
  for (const field *f = t; f->key; f++) {
    char *dst = base + f->off;
    switch (f->type) {
    case F_MAP:
      apply_defaults(f->sub, dst);
      for (const field_over *o = f->over; o && o->key; o++)
        for (const field *g = f->sub; g->key; g++)
          if (!strcmp(g->key, o->key)) put_default(g->type, dst + g->off, o->dflt);
      break;
    case F_STR:
    case F_CHOICE:
      if (f->dstr) set_str(dst, f->cap, f->dstr);
      break;
    case F_INT_ARRAY:
      for (size_t i = 0; i < f->dn && i < f->cap; i++) ((int *)dst)[i] = (int)f->dlist[i];
      break;
    case F_SIZE_LIST:
      for (size_t i = 0; i < f->dn && i < f->cap; i++) ((size_t *)dst)[i] = (size_t)f->dlist[i];
      *(size_t *)(base + f->count_off) = f->dn < f->cap ? f->dn : f->cap;
      break;
    case F_BOOL:
    case F_INT:
    case F_ENUM:
    case F_I64:
    case F_U64:
    case F_SIZE:
    case F_FLOAT:
    case F_DOUBLE:
      put_default(f->type, dst, f->dflt);
      break;
    default: /* lists start empty; F_FP16AR and F_UNSUP_* store nothing */
      break;
    }
  }
}

void fl_job_defaults(fl_job *job) {
  memset(job, 0, sizeof *job);
  SET_STR(job->source, "<defaults>");
  apply_defaults(f_job, (char *)job);
}

/* ------------------------------------------------------------ parse context */

typedef struct seen_key {
  char path[PATH_BUF];
  int line, col; /* 1-based */
} seen_key;

typedef struct ctx {
  const char *name; /* file name for messages */
  yaml_document_t *doc;
  fl_job *job;
  seen_key *keys;
  size_t n_keys, cap_keys;
  int fp16_allreduce; /* -1 absent, else the value */
  int failed;
} ctx;

static fl_status verr(const char *name, int line, int col, const char *path, const char *fmt,
                      va_list ap) {
  char msg[768];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (line > 0)
    snprintf(g_err, sizeof g_err, "%s:%d:%d: %s%s%s", name, line, col, path ? path : "",
             path ? ": " : "", msg);
  else
    snprintf(g_err, sizeof g_err, "%s: %s%s%s", name, path ? path : "", path ? ": " : "", msg);
  FL_LOGE("%s", g_err);
  return FL_EINVAL;
}

/* An error at a node's position (key mark when the node is a key). */
static fl_status perr(ctx *c, const yaml_mark_t *mark, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fl_status perr(ctx *c, const yaml_mark_t *mark, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fl_status st = verr(c->name, mark ? (int)mark->line + 1 : 0, mark ? (int)mark->column + 1 : 0,
                      path, fmt, ap);
  va_end(ap);
  c->failed = 1;
  return st;
}

static const seen_key *find_key(const ctx *c, const char *path) {
  if (!c) return NULL;
  for (size_t i = 0; i < c->n_keys; i++)
    if (!strcmp(c->keys[i].path, path)) return &c->keys[i];
  return NULL;
}

static fl_status remember_key(ctx *c, const char *path, const yaml_mark_t *m) {
  if (c->n_keys == c->cap_keys) {
    size_t nc = c->cap_keys ? 2 * c->cap_keys : 64;
    seen_key *nk = realloc(c->keys, nc * sizeof *nk);
    if (!nk) return FL_ERR(FL_ENOMEM, "%s: out of memory parsing the job file", c->name);
    c->keys = nk;
    c->cap_keys = nc;
  }
  seen_key *k = &c->keys[c->n_keys++];
  if (snprintf(k->path, sizeof k->path, "%s", path) >= (int)sizeof k->path) k->path[0] = '\0';
  k->line = (int)m->line + 1;
  k->col = (int)m->column + 1;
  return FL_OK;
}

/* An error tied to a key that may or may not be in the file (cross-field
 * checks, also run on jobs built in code where c is NULL). */
static fl_status kerr(const ctx *c, const char *source, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fl_status kerr(const ctx *c, const char *source, const char *path, const char *fmt, ...) {
  const seen_key *k = find_key(c, path);
  va_list ap;
  va_start(ap, fmt);
  fl_status st = verr(c ? c->name : source, k ? k->line : 0, k ? k->col : 0, path, fmt, ap);
  va_end(ap);
  return st;
}

/* ------------------------------------------------------------ scalars */

static const char *node_kind(const yaml_node_t *n) {
  switch (n->type) {
  case YAML_MAPPING_NODE: return "a mapping";
  case YAML_SEQUENCE_NODE: return "a sequence";
  default: return "a scalar";
  }
}

static int is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *v = (const char *)n->data.scalar.value;
  return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
         !strcmp(v, "NULL");
}

/* Describe what a scalar node holds, for "expected X, got Y". */
static void describe(const yaml_node_t *n, char *out, size_t cap) {
  if (n->type != YAML_SCALAR_NODE) {
    snprintf(out, cap, "%s", node_kind(n));
  } else if (is_null(n)) {
    snprintf(out, cap, "null");
  } else {
    const char *v = (const char *)n->data.scalar.value;
    snprintf(out, cap, "%s\"%.40s%s\"",
             n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? "" : "quoted string ", v,
             strlen(v) > 40 ? "..." : "");
  }
}

static const char *plain(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return NULL;
  if (strlen((const char *)n->data.scalar.value) != n->data.scalar.length) return NULL;
  return (const char *)n->data.scalar.value;
}

static int parse_bool(const char *v, int *out) {
  static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON",
                                  NULL};
  static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF",
                                  NULL};
  if (fl_names_find(t, v) >= 0) return *out = 1, 1;
  if (fl_names_find(f, v) >= 0) return *out = 0, 1;
  return 0;
}

static int parse_i64(const char *v, long long *out) {
  char *end;
  if (!*v || !(*v == '-' || *v == '+' || (*v >= '0' && *v <= '9'))) return 0;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end) return 0;
  *out = x;
  return 1;
}

static int parse_u64(const char *v, unsigned long long *out) {
  char *end;
  if (!*v || !(*v == '+' || (*v >= '0' && *v <= '9'))) return 0;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end) return 0;
  *out = x;
  return 1;
}

/* 1: *out set; 0: not a decimal number (no hex floats, inf or nan);
 * -1: a number beyond double's range (overflow or underflow). */
static int parse_real(const char *v, double *out) {
  char *end;
  if (!*v || strspn(v, "0123456789+-.eE") != strlen(v)) return 0;
  errno = 0;
  double x = strtod(v, &end);
  if (*end) return 0;
  if (errno == ERANGE || !isfinite(x)) return -1;
  *out = x;
  return 1;
}

static fl_status check_range(ctx *c, const field *f, const yaml_mark_t *km, const char *path,
                             double x, const char *shown) {
  int ok = 1;
  if ((f->lim & LIM_LO) && ((f->lim & LIM_LOX) ? !(x > f->lo) : !(x >= f->lo))) ok = 0;
  if ((f->lim & LIM_HI) && ((f->lim & LIM_HIX) ? !(x < f->hi) : !(x <= f->hi))) ok = 0;
  if (ok) return FL_OK;
  if ((f->lim & LIM_LO) && (f->lim & LIM_HI))
    return perr(c, km, path, "must be in %c%g, %g%c, got %s", (f->lim & LIM_LOX) ? '(' : '[',
                f->lo, f->hi, (f->lim & LIM_HIX) ? ')' : ']', shown);
  if (f->lim & LIM_LO)
    return perr(c, km, path, "must be %s %g, got %s", (f->lim & LIM_LOX) ? ">" : ">=", f->lo,
                shown);
  return perr(c, km, path, "must be %s %g, got %s", (f->lim & LIM_HIX) ? "<" : "<=", f->hi, shown);
}

/* Parse a scalar of an element type into *dst (one element). */
static fl_status parse_elem(ctx *c, const field *f, ftype et, const yaml_node_t *n,
                            const yaml_mark_t *km, const char *path, void *dst, size_t strcap) {
  char got[64];
  const char *v = plain(n);
  describe(n, got, sizeof got);
  switch (et) {
  case F_BOOL: {
    int b;
    if (!v || !parse_bool(v, &b)) return perr(c, km, path, "expected a boolean, got %s", got);
    *(int *)dst = b;
    return FL_OK;
  }
  case F_INT:
  case F_I64:
  case F_SIZE: {
    long long x;
    if (!v || !parse_i64(v, &x)) return perr(c, km, path, "expected an integer, got %s", got);
    if (et == F_INT && (x < -2147483647LL - 1 || x > 2147483647LL))
      return perr(c, km, path, "integer out of range, got %s", got);
    if (et == F_SIZE && x < 0 && !(f->lim & LIM_LO))
      return perr(c, km, path, "must be >= 0, got %s", got);
    FL_TRY(check_range(c, f, km, path, (double)x, v));
    if (et == F_INT) *(int *)dst = (int)x;
    else if (et == F_I64) *(int64_t *)dst = (int64_t)x;
    else *(size_t *)dst = (size_t)x;
    return FL_OK;
  }
  case F_U64: {
    unsigned long long x;
    if (!v || !parse_u64(v, &x))
      return perr(c, km, path, "expected a non-negative integer, got %s", got);
    *(uint64_t *)dst = (uint64_t)x;
    return FL_OK;
  }
  case F_FLOAT:
  case F_DOUBLE: {
    double x;
    if (et == F_FLOAT && (f->lim & LIM_INF) && v && (!strcmp(v, "inf") || !strcmp(v, ".inf"))) {
      *(float *)dst = INFINITY;
      return FL_OK;
    }
    int ok = v ? parse_real(v, &x) : 0;
    if (ok < 0) return perr(c, km, path, "number out of range, got %s", got);
    if (!ok) return perr(c, km, path, "expected a number, got %s", got);
    if (et == F_FLOAT) {
      /* Range checks apply to the value as stored, so a float that
       * underflows to 0 cannot slip past a "> 0" limit. */
      if (fabs(x) > 3.4e38) return perr(c, km, path, "too large, got %s", v);
      if (x != 0.0 && (float)x == 0.0f)
        return perr(c, km, path, "too small (rounds to 0 as a float), got %s", v);
      x = (float)x;
    }
    FL_TRY(check_range(c, f, km, path, x, v));
    if (et == F_FLOAT) *(float *)dst = (float)x;
    else *(double *)dst = x;
    return FL_OK;
  }
  case F_STR:
  case F_CHOICE:
  case F_ENUM: {
    if (n->type != YAML_SCALAR_NODE || is_null(n))
      return perr(c, km, path, "expected a string, got %s", got);
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length)
      return perr(c, km, path, "contains a NUL byte");
    if (et == F_STR) {
      if (n->data.scalar.length >= strcap)
        return perr(c, km, path, "too long (at most %zu bytes), got %zu bytes", strcap - 1,
                    n->data.scalar.length);
      set_str(dst, strcap, s);
      return FL_OK;
    }
    const int i = fl_names_find(f->choices, s);
    if (i >= 0) {
      if (et == F_ENUM) *(int *)dst = i;
      else set_str(dst, strcap, s);
      return FL_OK;
    }
    char list[256] = "";
    for (int i = 0; f->choices[i]; i++) {
      strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
      strncat(list, f->choices[i], sizeof list - strlen(list) - 1);
    }
    return perr(c, km, path, "must be one of %s, got %s", list, got);
  }
  default:
    return perr(c, km, path, "internal: bad schema type");
  }
}

static fl_status walk_map(ctx *c, const field *table, const yaml_node_t *n, char *base,
                          const char *path);

/* {name: path, ...} into f's fl_job_input array: names unique, both
 * non-empty strings. */
static fl_status parse_path_map(ctx *c, const field *f, const yaml_node_t *v,
                                const yaml_mark_t *km, char *base, const char *path) {
  fl_job_input *dst = (fl_job_input *)(base + f->off);
  size_t *cnt = (size_t *)(base + f->count_off);
  char got[64];
  describe(v, got, sizeof got);
  *cnt = 0;
  if (is_null(v)) return FL_OK;
  if (v->type != YAML_MAPPING_NODE)
    return perr(c, km, path, "expected a mapping {model input: file.npy}, got %s", got);
  for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
    const yaml_node_t *val = yaml_document_get_node(c->doc, p->value);
    if (!k || !val) return perr(c, km, path, "missing node");
    if (*cnt == f->cap) return perr(c, &k->start_mark, path, "at most %zu entries", f->cap);
    char kpath[PATH_BUF];
    fl_job_input *e = &dst[*cnt];
    FL_TRY(parse_elem(c, f, F_STR, k, &k->start_mark, path, e->name, sizeof e->name));
    if (snprintf(kpath, sizeof kpath, "%s.%s", path, e->name) >= (int)sizeof kpath)
      return perr(c, &k->start_mark, path, "key too long");
    if (!e->name[0]) return perr(c, &k->start_mark, path, "an input name must not be empty");
    for (size_t i = 0; i < *cnt; i++)
      if (!strcmp(dst[i].name, e->name)) return perr(c, &k->start_mark, kpath, "duplicate key");
    FL_TRY(parse_elem(c, f, F_STR, val, &val->start_mark, kpath, e->path, sizeof e->path));
    if (!e->path[0]) return perr(c, &val->start_mark, kpath, "needs a .npy file name");
    (*cnt)++;
  }
  return FL_OK;
}

/* A sparse table's init: a name of k_sparse_inits ("uniform" takes
 * pserver.sparse.init_range, filled by normalise) or "uniform(R)", R in
 * [0, 1e3]. */
static fl_status parse_sparse_init(ctx *c, const yaml_node_t *v, const yaml_mark_t *km,
                                   char *base, const char *path) {
  fl_job_sparse_table *e = (fl_job_sparse_table *)base;
  const char *s = plain(v), *u = k_sparse_inits[FL_SPARSE_INIT_UNIFORM];
  const size_t ul = strlen(u);
  char got[64], *end = NULL;
  double r = 0;
  describe(v, got, sizeof got);
  e->init_range = NAN;
  const int i = fl_names_find(k_sparse_inits, s);
  if (i >= 0) {
    e->init = (fl_job_sparse_init)i;
    return FL_OK;
  }
  e->init = FL_SPARSE_INIT_UNIFORM;
  if (s && !strncmp(s, u, ul) && s[ul] == '(') r = strtod(s + ul + 1, &end);
  if (!end || end == s + ul + 1 || strcmp(end, ")") || !(r >= 0 && r <= 1e3))
    return perr(c, km, path, "expected %s, %s(R) with R in [0, 1000] or %s, got %s", u, u,
                k_sparse_inits[FL_SPARSE_INIT_FROM_MODEL], got);
  e->init_range = (float)r;
  return FL_OK;
}

/* {name: {optimizer, init, padding_id}, ...} into f's fl_job_sparse_table
 * array: names unique and non-empty, at most cap. */
static fl_status parse_table_map(ctx *c, const field *f, const yaml_node_t *v,
                                 const yaml_mark_t *km, char *base, const char *path) {
  fl_job_sparse_table *dst = (fl_job_sparse_table *)(base + f->off);
  int *cnt = (int *)(base + f->count_off);
  char got[64];
  describe(v, got, sizeof got);
  *cnt = 0;
  if (is_null(v)) return FL_OK;
  if (v->type != YAML_MAPPING_NODE)
    return perr(c, km, path, "expected a mapping {initializer: {optimizer, init, padding_id}}, "
                "got %s", got);
  for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
    const yaml_node_t *val = yaml_document_get_node(c->doc, p->value);
    if (!k || !val) return perr(c, km, path, "missing node");
    if ((size_t)*cnt == f->cap)
      return perr(c, &k->start_mark, path, "at most %zu tables", f->cap);
    char kpath[PATH_BUF];
    fl_job_sparse_table *e = &dst[*cnt];
    memset(e, 0, sizeof *e);
    apply_defaults(f->sub, (char *)e);
    e->init_range = NAN;
    FL_TRY(parse_elem(c, f, F_STR, k, &k->start_mark, path, e->name, sizeof e->name));
    if (snprintf(kpath, sizeof kpath, "%s.%s", path, e->name) >= (int)sizeof kpath)
      return perr(c, &k->start_mark, path, "key too long");
    if (!e->name[0]) return perr(c, &k->start_mark, path, "a table name must not be empty");
    for (int i = 0; i < *cnt; i++)
      if (!strcmp(dst[i].name, e->name))
        return perr(c, &k->start_mark, kpath, "duplicate table (each initializer once)");
    FL_TRY(remember_key(c, kpath, &k->start_mark));
    FL_TRY(walk_map(c, f->sub, val, (char *)e, kpath));
    e->has_padding = e->padding_id >= 0;
    (*cnt)++;
  }
  return FL_OK;
}

static fl_status parse_field(ctx *c, const field *f, const yaml_node_t *v, const yaml_mark_t *km,
                             char *base, const char *path) {
  char got[64];
  describe(v, got, sizeof got);
  char *dst = base + f->off;
  switch (f->type) {
  case F_MAP:
    return walk_map(c, f->sub, v, dst, path);
  case F_BOOL:
  case F_INT:
  case F_I64:
  case F_U64:
  case F_SIZE:
  case F_FLOAT:
  case F_DOUBLE:
  case F_ENUM:
    return parse_elem(c, f, f->type, v, km, path, dst, 0);
  case F_STR:
  case F_CHOICE:
    return parse_elem(c, f, f->type, v, km, path, dst, f->cap);
  case F_PATH_LIST:
    if (v->type == YAML_SCALAR_NODE && !is_null(v)) { /* one file or glob */
      *(size_t *)(base + f->count_off) = 1;
      return parse_elem(c, f, F_STR, v, km, path, dst, FL_JOB_PATH_MAX);
    }
    /* fall through */
  case F_INT_ARRAY:
  case F_SIZE_LIST:
  case F_I64_LIST:
  case F_FLOAT_LIST:
  case F_STR_LIST: {
    if (v->type != YAML_SEQUENCE_NODE) {
      if (is_null(v) && f->type != F_INT_ARRAY) {
        *(size_t *)(base + f->count_off) = 0;
        return FL_OK;
      }
      return perr(c, km, path, "expected a sequence, got %s", got);
    }
    size_t cnt = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (f->type == F_INT_ARRAY && cnt != f->cap)
      return perr(c, km, path, "expected exactly %zu entries, got %zu", f->cap, cnt);
    if (cnt > f->cap) return perr(c, km, path, "at most %zu entries, got %zu", f->cap, cnt);
    size_t esz;
    const ftype et = list_elem(f->type, &esz);
    for (size_t i = 0; i < cnt; i++) {
      const yaml_node_t *item = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
      char ipath[PATH_BUF];
      if (snprintf(ipath, sizeof ipath, "%s[%zu]", path, i) >= (int)sizeof ipath)
        return perr(c, km, path, "key path too long");
      if (!item) return perr(c, km, ipath, "missing node");
      FL_TRY(parse_elem(c, f, et, item, &item->start_mark, ipath, dst + i * esz, esz));
    }
    if (f->type != F_INT_ARRAY) *(size_t *)(base + f->count_off) = cnt;
    return FL_OK;
  }
  case F_FP16AR: {
    int b = 0;
    FL_TRY(parse_elem(c, f, F_BOOL, v, km, path, &b, 0));
    c->fp16_allreduce = b;
    return FL_OK;
  }
  case F_UNSUP_BOOL:
  case F_UNSUP_NUM: {
    double x = 0;
    int b = 0;
    const char *pv = plain(v);
    int ok = f->type == F_UNSUP_BOOL ? (pv && parse_bool(pv, &b) && b == (int)f->dflt)
                                     : (pv && parse_real(pv, &x) == 1 && x == f->dflt);
    if (ok) return FL_OK;
    if (f->type == F_UNSUP_BOOL)
      return perr(c, km, NULL, "%s is not supported by Flotilla (only its default, %s, is "
                  "accepted), got %s", path, f->dflt != 0 ? "true" : "false", got);
    return perr(c, km, NULL, "%s is not supported by Flotilla (only its default, %g, is "
                "accepted), got %s", path, f->dflt, got);
  }
  case F_PATH_MAP:
    return parse_path_map(c, f, v, km, base, path);
  case F_TABLE_MAP:
    return parse_table_map(c, f, v, km, base, path);
  case F_SPARSE_INIT:
    return parse_sparse_init(c, v, km, base, path);
  case F_UNSUP_MAP:
    if (is_null(v) || (v->type == YAML_MAPPING_NODE &&
                       v->data.mapping.pairs.top == v->data.mapping.pairs.start))
      return FL_OK;
    return perr(c, km, NULL, "%s is not supported by Flotilla (only an empty mapping is "
                "accepted)", path);
  }
  return perr(c, km, path, "internal: bad schema type");
}

static fl_status walk_map(ctx *c, const field *table, const yaml_node_t *n, char *base,
                          const char *path) {
  unsigned char seen[MAX_FIELDS] = {0};
  if (is_null(n)) return FL_OK; /* "section:" with nothing under it */
  if (n->type != YAML_MAPPING_NODE) {
    char got[64];
    describe(n, got, sizeof got);
    return perr(c, &n->start_mark, path[0] ? path : NULL, "expected a mapping, got %s", got);
  }
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
    const yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
    if (!k || !v) return perr(c, &n->start_mark, path, "missing node");
    const char *key = plain(k);
    if (!key && k->type == YAML_SCALAR_NODE) key = (const char *)k->data.scalar.value;
    if (!key || k->type != YAML_SCALAR_NODE) {
      return perr(c, &k->start_mark, path[0] ? path : NULL, "keys must be plain strings, got %s",
                  node_kind(k));
    }
    char kpath[PATH_BUF];
    if (snprintf(kpath, sizeof kpath, "%s%s%s", path, path[0] ? "." : "", key) >=
        (int)sizeof kpath)
      return perr(c, &k->start_mark, path[0] ? path : NULL, "key too long");
    size_t i;
    for (i = 0; table[i].key; i++)
      if (!strcmp(table[i].key, key)) break;
    if (!table[i].key) {
      const char *best = NULL;
      size_t bd = 3;
      for (size_t j = 0; table[j].key; j++) {
        size_t d = fl_edit_distance(key, table[j].key);
        if (d < bd) bd = d, best = table[j].key;
      }
      if (best) return perr(c, &k->start_mark, kpath, "unknown key (did you mean \"%s\"?)", best);
      return perr(c, &k->start_mark, kpath, "unknown key");
    }
    if (i >= MAX_FIELDS) return perr(c, &k->start_mark, kpath, "internal: schema too large");
    if (seen[i]) return perr(c, &k->start_mark, kpath, "duplicate key");
    seen[i] = 1;
    FL_TRY(remember_key(c, kpath, &k->start_mark));
    FL_TRY(parse_field(c, &table[i], v, &k->start_mark, base, kpath));
  }
  return FL_OK;
}

/* ------------------------------------------------------------ checks */

static int has(const ctx *c, const char *path) { return find_key(c, path) != NULL; }

/* pserver.sparse_tables: an entry without an optimizer takes
 * pserver.sparse.optimizer, one without an init range its init_range. */
static void table_defaults(const ctx *c, fl_job_pserver *ps) {
  char path[PATH_BUF];
  for (int i = 0; i < ps->n_sparse_tables; i++) {
    fl_job_sparse_table *e = &ps->sparse_tables[i];
    snprintf(path, sizeof path, "pserver.sparse_tables.%s.optimizer", e->name);
    if (!has(c, path)) e->optimizer = ps->sparse.optimizer;
    if (isnan(e->init_range)) e->init_range = ps->sparse.init_range;
  }
}

/* Normalisation that depends on what the file gave (see fl_config.h). */
static fl_status normalise(ctx *c) {
  fl_job *job = c->job;
  fl_strategy *s = &job->strategy;
  if (job->optimizer.hp.kind == FL_OPTIM_LARS) {
    job->optimizer.hp.kind = FL_OPTIM_MOMENTUM;
    s->lars = 1;
  } else if (job->optimizer.hp.kind == FL_OPTIM_LAMB) {
    job->optimizer.hp.kind = FL_OPTIM_ADAM;
    s->lamb = 1;
  }
  if (!has(c, "optimizer.epsilon")) job->optimizer.hp.epsilon = eps_default(s->lamb);
  if (!has(c, "pserver.optimizer")) {
    job->pserver.optimizer = job->optimizer;
    /* the trainers clip; the servers' optimizers take no grad_clip */
    memset(&job->pserver.optimizer.grad_clip, 0, sizeof job->pserver.optimizer.grad_clip);
    job->pserver.optimizer.grad_clip.norm_type = job->optimizer.grad_clip.norm_type;
  } else if (!has(c, "pserver.optimizer.epsilon")) {
    job->pserver.optimizer.hp.epsilon = eps_default(s->lamb);
  }
  table_defaults(c, &job->pserver);
  if (c->fp16_allreduce >= 0) {
    int given = has(c, "strategy.grad_compression");
    if (c->fp16_allreduce) {
      if (given && s->grad_compression != FL_COMPRESS_FP16)
        return kerr(c, NULL, "strategy.fp16_allreduce",
                    "true conflicts with strategy.grad_compression: %s",
                    k_compress[s->grad_compression]);
      s->grad_compression = FL_COMPRESS_FP16;
    } else if (given && s->grad_compression == FL_COMPRESS_FP16) {
      return kerr(c, NULL, "strategy.fp16_allreduce",
                  "false conflicts with strategy.grad_compression: fp16");
    }
  }
  return FL_OK;
}

static int list_has_empty(const char (*l)[FL_JOB_NAME_MAX], size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!l[i][0]) return 1;
  return 0;
}

/* data.inputs / test_inputs: npy data of an onnx model, replacing train_x
 * and test_x, the same names for training and test. */
/* The n inputs of key (data.test_inputs, data.validation_inputs) name the
 * inputs data.inputs names, each once. */
static fl_status same_inputs(const ctx *c, const fl_job *job, const char *key,
                             const fl_job_input *in, size_t n) {
  const fl_job_data *d = &job->data;
  for (size_t i = 0; i < d->n_inputs; i++) {
    size_t j = 0;
    while (j < n && strcmp(d->inputs[i].name, in[j].name)) j++;
    if (j == n || n != d->n_inputs)
      return kerr(c, job->source, key, "must name the inputs data.inputs names (%s%s)",
                  d->inputs[i].name, j == n ? " is missing" : ", and no other");
  }
  return FL_OK;
}

static fl_status check_inputs(const ctx *c, const fl_job *job) {
  const char *src = job->source;
  const fl_job_data *d = &job->data;
  if (!fl_model_kind_has(job->model.kind, FL_KIND_FILE))
    return kerr(c, src, "data.inputs", "named inputs feed an onnx model (model.kind: onnx), "
                "not %s", job->model.kind);
  if (!d->n_inputs) return kerr(c, src, "data.inputs", "required with data.test_inputs");
  if (d->train_x[0] || d->test_x[0])
    return kerr(c, src, d->train_x[0] ? "data.train_x" : "data.test_x",
                "data.inputs replaces it: name each model input's file there");
  if (!d->train_y[0]) return kerr(c, src, "data.train_y", "required with data.inputs");
  if (!job->train.eval) return FL_OK;
  if (!d->n_test_inputs || !d->test_y[0])
    return kerr(c, src, d->n_test_inputs ? "data.test_y" : "data.test_inputs",
                "required with train.eval: true");
  return same_inputs(c, job, "data.test_inputs", d->test_inputs, d->n_test_inputs);
}

/* lr_schedule keys every kind reads. */
static const char *const k_lr_common[] = {"kind", "warmup_steps", "warmup_start_lr", NULL};

/* Whether field f (a number, enum or list) of the struct at base holds its
 * default (a list: empty). */
static int at_default(const field *f, const char *base) {
  const char *p = base + f->off;
  switch (f->type) {
  case F_FLOAT: return *(const float *)p == (float)f->dflt;
  case F_I64: return *(const int64_t *)p == (int64_t)f->dflt;
  case F_ENUM: return *(const int *)p == (int)f->dflt;
  case F_I64_LIST:
  case F_FLOAT_LIST: return *(const size_t *)(base + f->count_off) == 0;
  default: return 1;
  }
}

/* A key of lr_schedule away from its default that its kind does not read
 * (the dump writes every key, at its default where unused). */
static fl_status check_lr_keys(const ctx *c, const fl_job *job) {
  fl_lr_kind k = job->lr_schedule.kind;
  char path[PATH_BUF];
  for (const field *f = f_lr; f->key; f++) {
    const int common = fl_names_find(k_lr_common, f->key) >= 0;
    snprintf(path, sizeof path, "lr_schedule.%s", f->key);
    if (common || fl_lr_kind_takes(k, f->key) ||
        at_default(f, (const char *)&job->lr_schedule))
      continue;
    const char *keys = fl_lr_kind_keys(k);
    return kerr(c, job->source, path, "is not read by kind %s (it reads %s%s)",
                fl_lr_kind_names[k], keys[0] ? keys : "only kind and the warmup keys",
                keys[0] ? " and the warmup keys" : "");
  }
  return FL_OK;
}

/* Strictly increasing steps of a list key. */
static fl_status check_increasing(const ctx *c, const char *src, const char *path,
                                  const int64_t *v, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (v[i] <= v[i - 1])
      return kerr(c, src, path, "must be strictly increasing (%lld after %lld)", (long long)v[i],
                  (long long)v[i - 1]);
  return FL_OK;
}

/* lr_schedule: keys the kind does not read, and what each kind needs. */
static fl_status check_lr(const ctx *c, const fl_job *job) {
  const char *src = job->source;
  const fl_job_lr *l = &job->lr_schedule;
  FL_TRY(check_lr_keys(c, job));
  switch (l->kind) {
  case FL_LR_PIECEWISE:
    if (l->n_boundaries < 1)
      return kerr(c, src, "lr_schedule.boundaries", "piecewise needs at least one boundary");
    if (l->n_values != l->n_boundaries + 1)
      return kerr(c, src, "lr_schedule.values", "piecewise needs %zu values (boundaries + 1), "
                  "got %zu", l->n_boundaries + 1, l->n_values);
    return check_increasing(c, src, "lr_schedule.boundaries", l->boundaries, l->n_boundaries);
  case FL_LR_STEP:
    if (l->step_size < 1)
      return kerr(c, src, "lr_schedule.step_size", "kind step needs it (steps between decays)");
    return FL_OK;
  case FL_LR_MULTISTEP:
    if (l->n_milestones < 1)
      return kerr(c, src, "lr_schedule.milestones", "kind multistep needs at least one");
    return check_increasing(c, src, "lr_schedule.milestones", l->milestones, l->n_milestones);
  case FL_LR_INVERSE_SQRT:
    if (l->warmup_steps < 1)
      return kerr(c, src, "lr_schedule.warmup_steps", "kind inverse_sqrt needs it >= 1 (the "
                  "rate is lr * sqrt(warmup_steps / step) after the warmup)");
    return FL_OK;
  case FL_LR_PLATEAU:
    if (!job->train.eval && !fl_job_has_validation(job))
      return kerr(c, src, "lr_schedule.kind", "plateau follows the evaluation's %s: it needs "
                  "train.eval: true or a validation set", fl_lr_metric_names[l->metric]);
    return FL_OK;
  default: return FL_OK;
  }
}

int fl_job_has_validation(const fl_job *job) {
  return job->data.validation_split > 0 || job->data.validation_x[0] ||
         job->data.n_validation_inputs;
}

int fl_job_sparse_data(const fl_job *job) {
  const fl_job_data *d = &job->data;
  return d->format == FL_DATA_LIBSVM ||
         (d->format == FL_DATA_SYNTHETIC && d->synthetic.kind == FL_SYNTH_CTR);
}

/* The validation set's sources, and what needs one. */
static fl_status check_validation(const ctx *c, const fl_job *job) {
  const char *src = job->source;
  const fl_job_data *d = &job->data;
  const fl_job_train *t = &job->train;
  const int sparse = fl_job_sparse_data(job) || d->format == FL_DATA_CRITEO;
  if (d->validation_split > 0 && d->validation_x[0])
    return kerr(c, src, "data.validation_x", "give data.validation_split or validation files, "
                "not both");
  if (d->validation_x[0] && (d->format != FL_DATA_NPY || d->n_inputs || !d->validation_y[0]))
    return kerr(c, src, d->validation_y[0] ? "data.validation_x" : "data.validation_y",
                "validation files are npy features and labels (data.format npy without "
                "data.inputs) given together; otherwise use data.validation_split");
  if (d->n_validation_inputs) {
    if (!d->n_inputs || !d->validation_y[0] || d->validation_split > 0)
      return kerr(c, src, d->n_inputs && !d->validation_y[0] ? "data.validation_y"
                  : "data.validation_inputs", "named validation files go with data.inputs and "
                  "data.validation_y, without data.validation_split");
    FL_TRY(same_inputs(c, job, "data.validation_inputs", d->validation_inputs,
                       d->n_validation_inputs));
  } else if (!d->validation_x[0] && d->validation_y[0]) {
    return kerr(c, src, "data.validation_y", "needs data.validation_x or data.validation_inputs");
  }
  if (fl_job_has_validation(job) && sparse)
    return kerr(c, src, d->validation_x[0] ? "data.validation_x" : "data.validation_split",
                "validation applies to dense data, not to format %s", k_formats[d->format]);
  if (t->keep_best != FL_VAL_NONE && job->cluster.mode == FL_MODE_PS && job->strategy.a_sync &&
      job->strategy.a_sync_configs.k_steps > 0)
    return kerr(c, src, "train.keep_best", "geo (a_sync_configs.k_steps > 0) pushes each "
                "trainer's last delta from its model at the end, which would be the restored "
                "best one; use sync or async ps, or leave keep_best out");
  if (fl_job_has_validation(job)) return FL_OK;
  if (t->keep_best != FL_VAL_NONE || t->early_stopping.metric != FL_VAL_NONE ||
      t->validate_every > 0)
    return kerr(c, src, t->keep_best ? "train.keep_best" : t->validate_every ?
                "train.validate_every" : "train.early_stopping.metric",
                "needs a validation set: data.validation_split or data.validation_x/_y");
  return FL_OK;
}

/* optimizer.grad_clip: the bound its kind needs; the pserver's optimizers
 * take none (the trainers clip before they push). */
static fl_status check_clip(const ctx *c, const fl_job *job) {
  const char *src = job->source;
  const fl_clip_kind k = job->optimizer.grad_clip.kind;
  if (job->pserver.optimizer.grad_clip.kind != FL_CLIP_NONE ||
      job->pserver.sparse.optimizer.grad_clip.kind != FL_CLIP_NONE)
    return kerr(c, src, job->pserver.optimizer.grad_clip.kind != FL_CLIP_NONE
                            ? "pserver.optimizer.grad_clip.kind"
                            : "pserver.sparse.optimizer.grad_clip.kind",
                "the trainers clip their gradients before they push them: set "
                "optimizer.grad_clip instead");
  if ((k == FL_CLIP_GLOBAL_NORM || k == FL_CLIP_NORM) && !(job->optimizer.grad_clip.max_norm > 0))
    return kerr(c, src, "optimizer.grad_clip.max_norm", "kind %s needs it (> 0)",
                fl_clip_kind_names[k]);
  if (k == FL_CLIP_VALUE && !(job->optimizer.grad_clip.clip_value > 0))
    return kerr(c, src, "optimizer.grad_clip.clip_value", "kind value needs it (> 0)");
  if (k != FL_CLIP_NONE && fl_model_kind_has(job->model.kind, FL_KIND_SPARSE))
    return kerr(c, src, "optimizer.grad_clip.kind", "%s is not supported with model.kind %s "
                "(its embedding gradients are sparse rows): use kind none",
                fl_clip_kind_names[k], job->model.kind);
  return FL_OK;
}

/* pserver.sparse_tables: an onnx model's initializers trained on the
 * pservers, on the cpu, each with a row optimizer the pservers take. */
static fl_status check_sparse_tables(const ctx *c, const fl_job *job) {
  const fl_job_pserver *ps = &job->pserver;
  const char *src = job->source, *key = "pserver.sparse_tables";
  char path[PATH_BUF];
  if (ps->n_sparse_tables == 0) return FL_OK;
  if (job->cluster.mode != FL_MODE_PS)
    return kerr(c, src, key, "the tables live on the pservers: they need cluster.mode ps, got "
                "%s (remove pserver.sparse_tables to train every initializer densely)",
                fl_mode_name(job->cluster.mode));
  if (!fl_model_kind_has(job->model.kind, FL_KIND_FILE))
    return kerr(c, src, key, "names initializers of an ONNX model: needs model.kind onnx, got "
                "%s", job->model.kind);
  if (job->train.device == FL_DEVICE_GPU)
    return kerr(c, src, key, "a model with sparse tables trains on the cpu: set train.device "
                "cpu");
  for (int i = 0; i < ps->n_sparse_tables; i++) {
    const fl_job_optimizer *o = &ps->sparse_tables[i].optimizer;
    snprintf(path, sizeof path, "%s.%s.optimizer.", key, ps->sparse_tables[i].name);
    const size_t len = strlen(path);
    snprintf(path + len, sizeof path - len, "name");
    if (!fl_proto_sparse_optim_ok(o->hp.kind))
      return kerr(c, src, path, "must be " FL_PROTO_SPARSE_OPTIMS ", got %s",
                  fl_optim_kind_names[o->hp.kind]);
    snprintf(path + len, sizeof path - len, "grad_clip.kind");
    if (o->grad_clip.kind != FL_CLIP_NONE)
      return kerr(c, src, path, "takes none (the trainers clip: set optimizer.grad_clip)");
  }
  return FL_OK;
}

/* The cross-field rules; c (may be NULL) gives the marks. */
static fl_status check_job(const ctx *c, const fl_job *job) {
  const char *src = job->source;
  const fl_strategy *s = &job->strategy;
  const fl_job_model *m = &job->model;
  const fl_job_data *d = &job->data;
  const fl_job_optimizer *o = &job->optimizer;

  if (s->lars && s->lamb)
    return kerr(c, src, has(c, "strategy.lamb") ? "strategy.lamb" : "strategy.lars",
                "lars and lamb cannot both be true");
  if (s->lars) {
    if (o->hp.kind != FL_OPTIM_MOMENTUM)
      return kerr(c, src, "strategy.lars", "needs optimizer.name momentum (LARS's inner "
                  "optimizer), got %s", fl_optim_kind_names[o->hp.kind]);
    if (o->hp.nesterov)
      return kerr(c, src, "optimizer.nesterov", "must be false with strategy.lars");
  }
  if (s->lamb && o->hp.kind != FL_OPTIM_ADAM && o->hp.kind != FL_OPTIM_ADAMW)
    return kerr(c, src, "strategy.lamb", "needs optimizer.name adam or adamw (LAMB's inner "
                "optimizer), got %s", fl_optim_kind_names[o->hp.kind]);
  if ((s->lars || s->lamb) && o->hp.weight_decay != 0.0f)
    return kerr(c, src, "optimizer.weight_decay", "must be 0 with strategy.%s (set %s instead)",
                s->lars ? "lars" : "lamb",
                s->lars ? "lars_configs.lars_weight_decay" : "lamb_configs.lamb_weight_decay");
  if (job->optimizer.hp.kind == FL_OPTIM_LARS || job->optimizer.hp.kind == FL_OPTIM_LAMB)
    return kerr(c, src, "optimizer.name", "lars and lamb are set through strategy.lars/lamb");
  if (job->pserver.optimizer.hp.kind == FL_OPTIM_LARS || job->pserver.optimizer.hp.kind == FL_OPTIM_LAMB)
    return kerr(c, src, "pserver.optimizer.name",
                "must be a plain optimizer (strategy.lars/lamb apply on the server too)");
  if (s->lars && job->pserver.optimizer.hp.kind != FL_OPTIM_MOMENTUM)
    return kerr(c, src, "pserver.optimizer.name", "needs momentum with strategy.lars, got %s",
                fl_optim_kind_names[job->pserver.optimizer.hp.kind]);
  if (s->lamb && job->pserver.optimizer.hp.kind != FL_OPTIM_ADAM &&
      job->pserver.optimizer.hp.kind != FL_OPTIM_ADAMW)
    return kerr(c, src, "pserver.optimizer.name", "needs adam or adamw with strategy.lamb, got %s",
                fl_optim_kind_names[job->pserver.optimizer.hp.kind]);
  if (fl_optim_sparse_only(o->hp.kind) || fl_optim_sparse_only(job->pserver.optimizer.hp.kind))
    return kerr(c, src, fl_optim_sparse_only(o->hp.kind) ? "optimizer.name" : "pserver.optimizer.name",
                "%s is for sparse-table rows only: set it as pserver.sparse.optimizer.name",
                fl_optim_kind_names[fl_optim_sparse_only(o->hp.kind) ? o->hp.kind
                                                                   : job->pserver.optimizer.hp.kind]);
  {
    fl_optim_kind sk = job->pserver.sparse.optimizer.hp.kind;
    if (!fl_proto_sparse_optim_ok(sk))
      return kerr(c, src, "pserver.sparse.optimizer.name",
                  "must be " FL_PROTO_SPARSE_OPTIMS ", got %s", fl_optim_kind_names[sk]);
  }
  if (s->a_sync_configs.k_steps > 0 && !s->a_sync)
    return kerr(c, src, "strategy.a_sync_configs.k_steps",
                "geo mode (k_steps %d > 0) needs strategy.a_sync: true", s->a_sync_configs.k_steps);
  if (list_has_empty(s->lars_configs.exclude_from_weight_decay, s->lars_configs.n_exclude) ||
      list_has_empty(s->lamb_configs.exclude_from_weight_decay, s->lamb_configs.n_exclude))
    return kerr(c, src,
                list_has_empty(s->lars_configs.exclude_from_weight_decay, s->lars_configs.n_exclude)
                    ? "strategy.lars_configs.exclude_from_weight_decay"
                    : "strategy.lamb_configs.exclude_from_weight_decay",
                "entries must not be empty (an empty string matches every parameter)");

  /* model */
  const int file = fl_model_kind_has(m->kind, FL_KIND_FILE);
  if (fl_model_kind_has(m->kind, FL_KIND_PLUGIN) && !m->plugin_path[0])
    return kerr(c, src, "model.kind", "plugin needs model.plugin_path");
  if (file && !m->path[0])
    return kerr(c, src, "model.kind", "onnx needs model.path (the .onnx file)");
  if (!file && (m->path[0] || m->output[0]))
    return kerr(c, src, m->path[0] ? "model.path" : "model.output",
                "only for model.kind onnx, the kind is %s", m->kind);
  if (!file && m->loss != FL_LOSS_SOFTMAX_XENT) /* the presets train with the first loss */
    return kerr(c, src, "model.loss", "%s needs model.kind onnx; %s trains with %s",
                fl_loss_names[m->loss], m->kind, fl_loss_names[FL_LOSS_SOFTMAX_XENT]);
  if (job->train.export_onnx[0] && !fl_model_kind_has(m->kind, FL_KIND_EXPORT))
    return kerr(c, src, "train.export_onnx", "model.kind %s cannot be exported as ONNX "
                "(logreg, mlp, cnn and onnx can)", m->kind);
  if (fl_model_kind_has(m->kind, FL_KIND_CONV)) {
    if (m->conv_kernel % 2 == 0)
      return kerr(c, src, "model.conv_kernel", "must be odd, got %d", m->conv_kernel);
    if (m->norm == FL_NORM_GN &&
        (m->conv_channels[0] % m->gn_groups || m->conv_channels[1] % m->gn_groups))
      return kerr(c, src, "model.gn_groups", "%d must divide both conv_channels [%d, %d]",
                  m->gn_groups, m->conv_channels[0], m->conv_channels[1]);
  }
  int ctr_model = fl_model_kind_has(m->kind, FL_KIND_SPARSE);
  int ctr_data = fl_job_sparse_data(job);
  if (!file && d->format == FL_DATA_CRITEO)
    return kerr(c, src, "data.format", "criteo feeds an ONNX model (model.kind onnx, its inputs "
                "named in data.criteo), not %s; for the ctr model use data.format libsvm or "
                "synthetic kind ctr", m->kind);
  if (ctr_model && !ctr_data)
    return kerr(c, src, "data.format", "the ctr model needs libsvm data or synthetic kind ctr");
  if (!ctr_model && ctr_data)
    return kerr(c, src, has(c, "data.synthetic.kind") ? "data.synthetic.kind" : "data.format",
                "sparse (ctr) data needs model.kind ctr, got %s", m->kind);
  if (ctr_model && m->num_classes != 2)
    return kerr(c, src, "model.num_classes", "the ctr model is binary: must be 2, got %d",
                m->num_classes);
  if (ctr_data && (d->augment.hflip || d->augment.crop_padding))
    return kerr(c, src, "data.augment", "transforms images; sparse (ctr) data has none");

  /* data */
  if (d->format == FL_DATA_IDX) {
    if (!d->train_images[0] || !d->train_labels[0])
      return kerr(c, src, d->train_images[0] ? "data.train_labels" : "data.train_images",
                  "required with data.format idx");
    if (job->train.eval && (!d->test_images[0] || !d->test_labels[0]))
      return kerr(c, src, d->test_images[0] ? "data.test_labels" : "data.test_images",
                  "required with train.eval: true");
  } else if (d->format == FL_DATA_CRITEO) {
    if (!d->n_train_files && !d->train_path[0])
      return kerr(c, src, "data.train_files", "required with format criteo (files or globs)");
    if (job->train.eval && !d->n_test_files && !d->test_path[0])
      return kerr(c, src, "data.test_files", "required with train.eval: true");
    if (!strcmp(d->dense_input, d->sparse_input))
      return kerr(c, src, "data.criteo.sparse_input", "must differ from dense_input (%s)",
                  d->dense_input);
  } else if (d->format == FL_DATA_LIBSVM) {
    if (!d->train_path[0])
      return kerr(c, src, "data.train_path", "required with format %s", k_formats[d->format]);
    if (job->train.eval && !d->test_path[0])
      return kerr(c, src, "data.test_path", "required with train.eval: true");
  } else if (d->format == FL_DATA_NPY && (d->n_inputs || d->n_test_inputs)) {
    FL_TRY(check_inputs(c, job));
  } else if (d->format == FL_DATA_NPY) {
    if (!d->train_x[0] || !d->train_y[0])
      return kerr(c, src, d->train_x[0] ? "data.train_y" : "data.train_x",
                  "required with data.format npy");
    if (job->train.eval && (!d->test_x[0] || !d->test_y[0]))
      return kerr(c, src, d->test_x[0] ? "data.test_y" : "data.test_x",
                  "required with train.eval: true");
  }

  FL_TRY(check_lr(c, job));
  FL_TRY(check_clip(c, job));
  FL_TRY(check_sparse_tables(c, job));
  FL_TRY(check_validation(c, job));

  /* cluster */
  const fl_job_cluster *cl = &job->cluster;
  if (!cl->tls.cert[0] != !cl->tls.key[0])
    return kerr(c, src, cl->tls.cert[0] ? "cluster.tls.key" : "cluster.tls.cert",
                "cluster.tls.cert and cluster.tls.key go together");
  if (cl->tls.mutual && (!cl->tls.cert[0] || !cl->tls.ca[0]))
    return kerr(c, src, "cluster.tls.mutual", "needs cluster.tls.cert, key and ca");
  if (cl->tls.ca[0] && !cl->tls.cert[0])
    return kerr(c, src, "cluster.tls.ca", "TLS needs cluster.tls.cert and key as well");
  return FL_OK;
}

fl_status fl_job_validate(const fl_job *job) {
  if (!job) return FL_ERR(FL_EINVAL, "fl_job_validate: NULL job");
  g_err[0] = '\0';
  return check_job(NULL, job);
}

/* ------------------------------------------------------------ loading */

static void put_elem(FILE *out, ftype et, const field *f, const char *p);

/* The startup summary: the sections the file leaves out, and the keys of
 * optimizer and train it leaves to their defaults, with the values they
 * take (one info line; strings and lists, paths mostly, are left out). */
static void log_defaults(const ctx *c, const fl_job *job) {
  static const char *const detailed[] = {"optimizer", "train", NULL};
  char *text = NULL, path[PATH_BUF];
  size_t len = 0;
  int n = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  for (const field *s = f_job; s->key; s++) {
    if (!has(c, s->key)) {
      fprintf(f, "%s%s (whole section)", n++ ? ", " : "", s->key);
      continue;
    }
    if (fl_names_find(detailed, s->key) < 0) continue;
    for (const field *g = s->sub; g->key; g++) {
      if (g->type == F_MAP || g->type == F_FP16AR || g->type == F_UNSUP_BOOL ||
          g->type == F_UNSUP_NUM || g->type == F_UNSUP_MAP)
        continue;
      if (g->type == F_STR || g->type == F_PATH_MAP || g->type == F_TABLE_MAP ||
          (g->type >= F_INT_ARRAY && g->type <= F_STR_LIST))
        continue;
      snprintf(path, sizeof path, "%s.%s", s->key, g->key);
      if (has(c, path)) continue;
      fprintf(f, "%s%s=", n++ ? ", " : "", path);
      put_elem(f, g->type, g, (const char *)job + s->off + g->off);
    }
  }
  if (fclose(f) == 0 && n) FL_LOGI("%s relies on defaults for: %s", c->name, text);
  free(text);
}

static fl_status load_text(const char *text, size_t len, const char *name, fl_job *job) {
  yaml_parser_t parser;
  yaml_document_t doc, extra;
  ctx c = {.name = name, .doc = &doc, .job = job, .fp16_allreduce = -1};
  fl_status st = FL_OK;
  int have_doc = 0, have_extra = 0;

  g_err[0] = '\0';
  fl_job_defaults(job);
  SET_STR(job->source, name);
  if (len > MAX_FILE_BYTES) return perr(&c, NULL, NULL, "job file larger than %u bytes", MAX_FILE_BYTES);
  size_t openers = 0;
  for (size_t i = 0; i < len; i++) openers += text[i] == '[' || text[i] == '{';
  if (openers > MAX_FLOW_OPENERS)
    return perr(&c, NULL, NULL, "more than %d '[' and '{' characters (flow collections); write "
                "long or nested lists in block style", MAX_FLOW_OPENERS);
  if (!yaml_parser_initialize(&parser)) return FL_ERR(FL_ENOMEM, "%s: yaml parser init", name);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) goto syntax;
  have_doc = 1;
  if (!yaml_parser_load(&parser, &extra)) goto syntax;
  have_extra = 1;
  if (yaml_document_get_root_node(&extra)) {
    yaml_mark_t mk = yaml_document_get_root_node(&extra)->start_mark;
    st = perr(&c, &mk, NULL, "a job file holds one YAML document, found another");
    goto out;
  }
  const yaml_node_t *root = yaml_document_get_root_node(&doc);
  /* An empty file would train a default job without a word. */
  if (!root || (root->type == YAML_MAPPING_NODE &&
                root->data.mapping.pairs.start == root->data.mapping.pairs.top)) {
    st = perr(&c, NULL, NULL, "the job file has no section (model, data, optimizer, lr_schedule, "
              "train, cluster, pserver, strategy): nothing to train");
    goto out;
  }
  st = walk_map(&c, f_job, root, (char *)job, "");
  if (st != FL_OK) goto out;
  st = normalise(&c);
  if (st == FL_OK) st = check_job(&c, job);
  if (st == FL_OK) log_defaults(&c, job);
  goto out;

syntax:
  st = perr(&c, &parser.problem_mark, NULL, "YAML syntax error: %s%s%s",
            parser.problem ? parser.problem : "unknown", parser.context ? " " : "",
            parser.context ? parser.context : "");
out:
  if (have_extra) yaml_document_delete(&extra);
  if (have_doc) yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  free(c.keys);
  return st;
}

fl_status fl_job_load_string(const char *text, const char *name, fl_job *job) {
  if (!text || !job) return FL_ERR(FL_EINVAL, "fl_job_load_string: NULL argument");
  return load_text(text, strlen(text), name ? name : "<string>", job);
}

fl_status fl_job_load_file(const char *path, fl_job *job) {
  if (!path || !job) return FL_ERR(FL_EINVAL, "fl_job_load_file: NULL argument");
  g_err[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(g_err, sizeof g_err, "%s: cannot open job file: %s", path, strerror(errno));
    FL_LOGE("%s", g_err);
    return FL_EIO;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  fl_status st = FL_OK;
  for (;;) {
    if (n > MAX_FILE_BYTES) {
      snprintf(g_err, sizeof g_err, "%s: job file larger than %u bytes", path, MAX_FILE_BYTES);
      FL_LOGE("%s", g_err);
      st = FL_EINVAL;
      break;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 16384;
      char *nb = realloc(buf, cap + 1);
      if (!nb) {
        st = FL_ERR(FL_ENOMEM, "%s: out of memory reading the job file", path);
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) {
        snprintf(g_err, sizeof g_err, "%s: read error", path);
        FL_LOGE("%s", g_err);
        st = FL_EIO;
      }
      break;
    }
  }
  fclose(f);
  if (st == FL_OK) {
    buf[n] = '\0';
    st = load_text(buf, n, path, job);
  }
  free(buf);
  return st;
}

/* ------------------------------------------------------------ writing */

/* A double-quoted scalar that loads back to s: besides '"' and '\\', the
 * characters YAML does not take raw (C0/C1 controls, DEL, U+FEFF, U+FFFE,
 * U+FFFF) and those it reads as line breaks inside quotes, folding them to
 * a space (NEL U+0085, LS U+2028, PS U+2029), are escaped. */
static void put_quoted(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      fprintf(out, "\\%c", *p);
    } else if (*p < 0x20 || *p == 0x7f) {
      fprintf(out, "\\x%02x", *p);
    } else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
      fprintf(out, "\\x%02x", p[1]);
      p++;
    } else if ((p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) ||
               (p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) ||
               (p[0] == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf))) {
      fprintf(out, "\\u%04x", ((p[0] & 0x0fu) << 12) | ((p[1] & 0x3fu) << 6) | (p[2] & 0x3fu));
      p += 2;
    } else {
      fputc(*p, out);
    }
  }
  fputc('"', out);
}

static void put_elem(FILE *out, ftype et, const field *f, const char *p) {
  switch (et) {
  case F_BOOL: fputs(*(const int *)p ? "true" : "false", out); break;
  case F_INT: fprintf(out, "%d", *(const int *)p); break;
  case F_I64: fprintf(out, "%lld", (long long)*(const int64_t *)p); break;
  case F_U64: fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case F_SIZE: fprintf(out, "%zu", *(const size_t *)p); break;
  case F_FLOAT: {
    /* the shortest decimal that parses back to the same float */
    float v = *(const float *)p;
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
      snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
      if ((float)strtod(buf, NULL) == v) break;
    }
    fputs(buf, out);
    break;
  }
  case F_DOUBLE: fprintf(out, "%.17g", *(const double *)p); break;
  case F_STR: put_quoted(out, p); break;
  case F_CHOICE: fputs(p, out); break;
  case F_ENUM: {
    int v = *(const int *)p, i;
    for (i = 0; f->choices[i] && i < v; i++) {}
    fputs(f->choices[i] ? f->choices[i] : "?", out);
    break;
  }
  default: break;
  }
}

/* One scalar event: plain (numbers, booleans, names) or double-quoted
 * (strings; the emitter escapes what YAML does not take raw). */
static int emit_scalar(yaml_emitter_t *em, const char *v, int quoted) {
  yaml_event_t ev;
  if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), !quoted,
                                    quoted,
                                    quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE))
    return 0;
  return yaml_emitter_emit(em, &ev);
}

/* Element p (of type et) as text: into buf for the plain types, or the
 * string itself (*quoted = 1). */
static const char *elem_text(ftype et, const field *f, const char *p, char *buf, size_t cap,
                             int *quoted) {
  *quoted = 0;
  if (et == F_STR) {
    *quoted = 1;
    return p;
  }
  if (et == F_CHOICE) return p;
  FILE *m = fmemopen(buf, cap, "w");
  if (!m) return "";
  put_elem(m, et, f, p);
  fclose(m);
  buf[cap - 1] = '\0';
  return buf;
}

static int emit_map(yaml_emitter_t *em, const field *table, const char *base);

/* An F_TABLE_MAP field as a block mapping {name: {entry}, ...}. */
static int emit_table_map(yaml_emitter_t *em, const field *f, const char *base) {
  yaml_event_t ev;
  const fl_job_sparse_table *e = (const fl_job_sparse_table *)(base + f->off);
  const int cnt = *(const int *)(base + f->count_off);
  if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
      !yaml_emitter_emit(em, &ev))
    return 0;
  for (int i = 0; i < cnt; i++)
    if (!emit_scalar(em, e[i].name, 1) || !emit_map(em, f->sub, (const char *)&e[i])) return 0;
  return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

/* An F_SPARSE_INIT field: from_model, or uniform(R) with R resolved. */
static int emit_sparse_init(yaml_emitter_t *em, const char *base) {
  const fl_job_sparse_table *e = (const fl_job_sparse_table *)base;
  char buf[64];
  if (e->init == FL_SPARSE_INIT_FROM_MODEL)
    return emit_scalar(em, k_sparse_inits[FL_SPARSE_INIT_FROM_MODEL], 0);
  snprintf(buf, sizeof buf, "%s(%.9g)", k_sparse_inits[FL_SPARSE_INIT_UNIFORM],
           (double)e->init_range);
  return emit_scalar(em, buf, 0);
}

/* An F_PATH_MAP field as a flow mapping {name: path, ...}. */
static int emit_path_map(yaml_emitter_t *em, const field *f, const char *base) {
  yaml_event_t ev;
  const fl_job_input *e = (const fl_job_input *)(base + f->off);
  const size_t cnt = *(const size_t *)(base + f->count_off);
  if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_FLOW_MAPPING_STYLE) ||
      !yaml_emitter_emit(em, &ev))
    return 0;
  for (size_t i = 0; i < cnt; i++)
    if (!emit_scalar(em, e[i].name, 1) || !emit_scalar(em, e[i].path, 1)) return 0;
  return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

static int emit_map(yaml_emitter_t *em, const field *table, const char *base) {
  yaml_event_t ev;
  char buf[64];
  int quoted;
  if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
      !yaml_emitter_emit(em, &ev))
    return 0;
  for (const field *f = table; f->key; f++) {
    const char *p = base + f->off;
    switch (f->type) {
    case F_FP16AR:
    case F_UNSUP_BOOL:
    case F_UNSUP_NUM:
    case F_UNSUP_MAP:
      continue; /* not stored; the resolved value is elsewhere or the default */
    case F_MAP: {
      int any = 0;
      for (const field *g = f->sub; g->key; g++)
        if (g->type != F_UNSUP_BOOL && g->type != F_UNSUP_NUM && g->type != F_UNSUP_MAP) any = 1;
      if (!any) continue;
      if (!emit_scalar(em, f->key, 0) || !emit_map(em, f->sub, p)) return 0;
      continue;
    }
    default: break;
    }
    if (!emit_scalar(em, f->key, 0)) return 0;
    if (f->type == F_PATH_MAP) {
      if (!emit_path_map(em, f, base)) return 0;
    } else if (f->type == F_TABLE_MAP) {
      if (!emit_table_map(em, f, base)) return 0;
    } else if (f->type == F_SPARSE_INIT) {
      if (!emit_sparse_init(em, base)) return 0;
    } else if (f->type >= F_INT_ARRAY && f->type <= F_PATH_LIST) {
      size_t cnt = f->type == F_INT_ARRAY ? f->cap : *(const size_t *)(base + f->count_off);
      size_t esz;
      const ftype et = list_elem(f->type, &esz);
      if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_FLOW_SEQUENCE_STYLE) ||
          !yaml_emitter_emit(em, &ev))
        return 0;
      for (size_t i = 0; i < cnt; i++) {
        const char *t = elem_text(et, f, p + i * esz, buf, sizeof buf, &quoted);
        if (!emit_scalar(em, t, quoted)) return 0;
      }
      if (!yaml_sequence_end_event_initialize(&ev) || !yaml_emitter_emit(em, &ev)) return 0;
    } else {
      const char *t = elem_text(f->type, f, p, buf, sizeof buf, &quoted);
      if (!emit_scalar(em, t, quoted)) return 0;
    }
  }
  return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

/* The dump is written by libyaml's emitter (which quotes and escapes
 * strings as YAML wants), after a comment line naming the source. */
fl_status fl_job_write_yaml(const fl_job *job, FILE *out) {
  yaml_emitter_t em;
  yaml_event_t ev;
  if (!job || !out) return FL_ERR(FL_EINVAL, "fl_job_write_yaml: NULL argument");
  fprintf(out, "# Flotilla job, resolved from ");
  for (const char *c = job->source; *c; c++) fputc(*c == '\n' || *c == '\r' ? ' ' : *c, out);
  fputc('\n', out);
  fflush(out);
  if (!yaml_emitter_initialize(&em)) return FL_ERR(FL_ENOMEM, "writing the resolved job: out of memory");
  yaml_emitter_set_output_file(&em, out);
  yaml_emitter_set_unicode(&em, 1);
  yaml_emitter_set_width(&em, 100);
  int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) &&
           yaml_emitter_emit(&em, &ev) &&
           yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
           yaml_emitter_emit(&em, &ev) && emit_map(&em, f_job, (const char *)job) &&
           yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&em, &ev) &&
           yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&em, &ev) &&
           yaml_emitter_flush(&em);
  fl_status st = FL_OK;
  if (!ok)
    st = FL_ERR(FL_EIO, "writing the resolved job: %s",
                em.problem ? em.problem : strerror(errno));
  yaml_emitter_delete(&em);
  if (st == FL_OK && (fflush(out) != 0 || ferror(out)))
    st = FL_ERR(FL_EIO, "writing the resolved job: %s", strerror(errno));
  return st;
}
