/* loop.c - the training loop of flotilla-trainer (contract in fl_trainer.h).
 *
 * One trainer struct holds what a run needs: the data, the loader, the
 * model, the optimizer tensors with their state, the gradient-merge
 * accumulators, the schedule and the loss scaler, and the position
 * (epoch, step) that checkpoints save and --resume restores.  Everything
 * that must come out the same bits after a resume is either in the
 * checkpoint or derived from (seed, epoch). */
#include <config.h>

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "fl_chunks.h"
#include "fl_ckpt.h"
#include "fl_data.h"
#include "fl_graph.h"
#include "fl_log.h"
#include "fl_model.h"
#include "fl_model_kind.h"
#include "fl_optim.h"
#include "fl_ps_client.h"
#include "fl_sparse_model.h"
#include "fl_trainer.h"
#include "loop_internal.h"
#include "model_internal.h"

#define CKPT_FORMAT FL_TRAINER_CKPT_FORMAT

typedef struct trainer {
  const fl_job *job;
  const fl_sync_ops *ops;
  void *self;
  const fl_sync *sync;
  FILE *log;
  int rank, world;
  int device; /* CUDA ordinal with train.device gpu */
  int64_t epoch_off; /* samples of this epoch's permutation taken by an
                      * earlier world (elastic resume), else 0 */
  int64_t base_world; /* the world the run started with (checkpointed): the
                       * LR scales by world x k / (base_world x k0) */
  int k0;             /* the job's gradient merge k (t->k may differ:
                       * elastic.keep_global_batch) */

  fl_dataset train, test;
  fl_sparse_dataset strain, stest; /* sparse data (fl_job_sparse_data) */
  fl_sparse_run *sparse;           /* a model with sparse tables: its pulls and pushes */
  int have_test;
  float *evalx; /* eval_batch_size samples of uint8 test features as fp32 */
  void *evalin[FL_DATA_MAX_INPUTS]; /* named inputs: an eval batch of each, as fed */
  fl_loader *loader;
  fl_stream *stream, *tstream; /* data.format criteo: training and test batches */
  fl_criteo_pos spos;          /* the stream's position a checkpoint gave */
  int have_spos;
  fl_augment aug; /* data.augment, with the images' shape and fill value */
  fl_model *model;

  size_t np;              /* model params incl. buffers */
  size_t nt;              /* trainable ones */
  fl_optim_tensor *tens;  /* nt */
  size_t *tparam;         /* nt: model index of tensor i */
  float **acc;            /* np: accumulator per trainable param (k > 1), else NULL */
  float **gptr;           /* nt: grad pointers (for the multi-tensor calls) */
  float **accp;           /* nt: accumulator pointers (k > 1) */
  size_t *gn;             /* nt: their lengths */
  unsigned char *ready;   /* np: grad handed to grad_ready this step */
  float *state;           /* one block for all optimizer state */
  float *accbuf;          /* one block for all accumulators */

  fl_optim_hparams hp;
  const char *exclude[FL_JOB_MAX_LIST];
  fl_lr_schedule sched;  /* plateau: its state moves in observe_metric */
  fl_clip clip;          /* optimizer.grad_clip */
  int clip_before_sync;  /* ps sync/async: clip what is pushed, before step_end */
  int clip_warned;       /* a non-finite norm was reported */
  fl_loss_scaler scaler;
  int amp;
  int k, avg;
  fl_status cb_err;

  int64_t steps_per_epoch;
  int64_t step;    /* optimizer steps done (global) */
  int64_t updates; /* optimizer updates applied (not AMP-skipped) */
  int64_t epoch;   /* current epoch */
  int64_t batch;   /* next micro-batch of the epoch */
  int64_t last_saved;
  char ckdir[FL_JOB_PATH_MAX];
  const fl_run_identity *id;
  int node_ckpt; /* FLOTILLA_NODE_CHECKPOINTS: this rank writes its node's
                  * own checkpoint_dir (local rank 0 of an elastic round) */
  int ps; /* ps mode: the servers hold the parameters and the step */
  int binary; /* bce_with_logits on the host: evaluations give auc and log loss */

  /* validation (loop_valid.c): samples [vfirst, vfirst + vn) of *vset,
   * which is val (validation files) or train (validation_split) */
  fl_dataset val;
  const fl_dataset *vset;
  size_t vfirst, vn;
  fl_val_tracker best, stop; /* train.keep_best, train.early_stopping */
  fl_val_snapshot snap;      /* the best validation's model */
  int early_stopped;
  float *bufsnap; /* elastic in process: the buffers (batch-norm statistics)
                   * at the start of the step, for undo_step; else NULL */
  fl_chunks *chunks; /* elastic ps: the epoch's data claimed chunk by chunk
                      * (fl_chunks.h); the trainers' steps then differ, so
                      * each evaluates alone (no step-named barrier) */
} trainer;

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ data */

/* t->aug from data.augment and the training images' shape; images: 0
 * when the samples are not (npy of one dimension); fill: what a raw 0
 * pixel became (padding is black, as torchvision pads before Normalize). */
static void set_augment(trainer *t, int images, float fill) {
  const fl_job_data *d = &t->job->data;
  t->aug = (fl_augment){.hflip = d->augment.hflip, .crop_padding = d->augment.crop_padding,
                        .channels = images ? t->train.channels : 0,
                        .height = images ? t->train.height : 0,
                        .width = images ? t->train.width : 0,
                        .fill = fill, .seed = t->job->train.seed};
}

/* data.inputs: one .npy file per model input (data_inputs.c), and the
 * labels; bound to the model's inputs once it is built (bind_inputs). */
/* The inputs data.inputs names, from the files src names (test or
 * validation inputs, taken in the training set's order; NULL: data.inputs'
 * own), and the labels y, into out. */
static fl_status load_named_set(trainer *t, const fl_job_input *src, size_t nsrc, const char *y,
                                int64_t limit, int lnc, fl_dataset *out) {
  const fl_job_data *d = &t->job->data;
  fl_npy_inputs in = {.n = d->n_inputs, .y_path = y, .num_classes = lnc,
                      .ignore_index = t->job->model.ignore_index, .scale = d->scale,
                      .limit = (size_t)limit};
  for (size_t k = 0; k < in.n; k++) {
    size_t j = 0;
    while (src && j + 1 < nsrc && strcmp(src[j].name, d->inputs[k].name)) j++;
    in.names[k] = d->inputs[k].name;
    in.paths[k] = src ? src[j].path : d->inputs[k].path;
  }
  return fl_npy_load_inputs(&in, out);
}

static fl_status load_named(trainer *t, int test, int lnc) {
  const fl_job_data *d = &t->job->data;
  if (d->augment.hflip || d->augment.crop_padding)
    return FL_ERR(FL_EINVAL, "%s: data.augment applies to images (data.train_x), not to "
                  "data.inputs", t->job->source);
  if (test)
    return load_named_set(t, d->test_inputs, d->n_test_inputs, d->test_y, d->limit_test, lnc,
                          &t->test);
  return load_named_set(t, NULL, 0, d->train_y, d->limit_train, lnc, &t->train);
}

/* data.format npy: features and labels (train_x/train_y), or named inputs
 * (data.inputs) and labels. */
static fl_status load_npy(trainer *t) {
  const fl_job *job = t->job;
  const fl_job_data *d = &job->data;
  const int nc = job->model.num_classes;
  /* fed as stored: no mean/std normalisation, so the model sees what the
   * user's PyTorch code feeds it; the model checks the sample size.  An
   * onnx model's class count is its output width, known once it is built
   * (check_labels); the presets' is model.num_classes. */
  int lnc = fl_model_kind_has(job->model.kind, FL_KIND_FILE) ? 0 : nc;
  int want_float = job->model.loss != FL_LOSS_SOFTMAX_XENT;
  const char *ty = d->train_y;
  if (d->n_inputs) FL_TRY(load_named(t, 0, lnc));
  else FL_TRY(fl_npy_load(d->train_x, d->train_y, lnc, d->scale, (size_t)d->limit_train, &t->train));
  if (want_float != (t->train.t != NULL))
    return FL_ERR(FL_EINVAL, "%s: %s, but model.loss %s needs %s", ty,
                  t->train.t ? "float32 targets" : "integer class ids",
                  fl_loss_names[job->model.loss],
                  want_float ? "float32 targets" : "int64 or int32 class ids");
  if (t->have_test) {
    if (d->n_inputs) FL_TRY(load_named(t, 1, lnc));
    else FL_TRY(fl_npy_load(d->test_x, d->test_y, lnc, d->scale, (size_t)d->limit_test, &t->test));
    if (t->test.dim != t->train.dim || !t->test.y != !t->train.y ||
        t->test.tdim != t->train.tdim || t->test.ylen != t->train.ylen)
      return FL_ERR(FL_EINVAL, "%s: test samples have %zu values and %s, %s has %zu and %s",
                    d->n_inputs ? d->test_inputs[0].path : d->test_x, t->test.dim,
                    t->test.y ? "class ids" : "float targets",
                    d->n_inputs ? d->inputs[0].path : d->train_x, t->train.dim,
                    t->train.y ? "class ids" : "float targets");
  }
  FL_LOGI("data: %zu training and %zu test samples of %zu %s values, %s labels%s", t->train.n,
          t->have_test ? t->test.n : 0, t->train.dim,
          t->train.n_inputs ? "named" : t->train.x ? "float32" : "uint8",
          t->train.y ? "class" : "float", t->train.ylen > 1 ? " per token" : "");
  set_augment(t, t->train.sample_ndim >= 2 && !t->train.n_inputs, 0.0f);
  return FL_OK;
}

/* Elastic ps (flotilla-run's agent sets FLOTILLA_ELASTIC_CHUNKS): the
 * trainers claim the epoch chunk by chunk, of the loader's or the stream's
 * whole epoch (a world of one). */
static int chunk_mode(const trainer *t) {
  const char *v = getenv("FLOTILLA_ELASTIC_CHUNKS");
  return v && v[0] && t->ps;
}

/* data.format criteo: the training files' stream (counted: the epoch's
 * steps) and the test files' (eval_batch_size, file order). */
static fl_status open_stream(trainer *t, int test, fl_stream **out) {
  const fl_job_data *d = &t->job->data;
  const char *pat[FL_JOB_MAX_LIST];
  size_t n = test ? d->n_test_files : d->n_train_files;
  for (size_t i = 0; i < n; i++) pat[i] = test ? d->test_files[i] : d->train_files[i];
  if (n == 0) pat[n++] = test ? d->test_path : d->train_path;
  const int whole = chunk_mode(t); /* chunks of the whole files; each evaluates all */
  const fl_stream_spec o = {
      .patterns = pat, .n_patterns = n, .dense_name = d->dense_input,
      .sparse_name = d->sparse_input,
      .batch_size = test ? t->job->train.eval_batch_size : t->job->train.batch_size,
      .rank = whole ? 0 : t->rank, .world_size = whole ? 1 : t->world,
      .seed = t->job->train.seed, .marks = whole && !test,
      .shuffle_buffer = test ? 0 : (size_t)d->shuffle_buffer,
      .bad_lines = d->bad_lines ? FL_CRITEO_SKIP : FL_CRITEO_STOP,
      .hash_buckets = (uint64_t)d->hash_buckets, .count = !test,
      .float_targets = t->job->model.loss != FL_LOSS_SOFTMAX_XENT};
  return fl_stream_open(&o, out);
}

static fl_status load_stream(trainer *t) {
  FL_TRY(open_stream(t, 0, &t->stream));
  if (t->have_test) FL_TRY(open_stream(t, 1, &t->tstream));
  return FL_OK;
}

static fl_status load_data(trainer *t) {
  const fl_job *job = t->job;
  const fl_job_data *d = &job->data;
  int nc = job->model.num_classes;
  t->have_test = job->train.eval;
  if (fl_job_sparse_data(job)) {
    FL_TRY(fl_loop_load_sparse(job, &t->strain, &t->stest));
    t->have_test = t->stest.n > 0;
    FL_LOGI("data: %zu training and %zu test sparse samples of %u slots", t->strain.n,
            t->stest.n, t->strain.num_slots);
    return FL_OK;
  }
  switch (d->format) {
  case FL_DATA_IDX:
    FL_TRY(fl_idx_load(d->train_images, d->train_labels, nc, (size_t)d->limit_train, &t->train));
    if (t->have_test)
      FL_TRY(fl_idx_load(d->test_images, d->test_labels, nc, (size_t)d->limit_test, &t->test));
    break;
  case FL_DATA_SYNTHETIC: {
    if (d->synthetic.kind != FL_SYNTH_IMAGE)
      return FL_ERR(FL_ENOTSUP, "%s: data.synthetic.kind %s: the CTR model trains in ps mode only",
                    job->source, fl_synth_kind_names[d->synthetic.kind]);
    fl_synth_image_config c = {.n = (size_t)d->synthetic.train_samples,
                               .channels = job->model.input_shape[0],
                               .height = job->model.input_shape[1],
                               .width = job->model.input_shape[2],
                               .num_classes = nc,
                               .seed = d->synthetic.seed};
    FL_TRY(fl_synth_images(&c, 0, &t->train));
    if (t->have_test) {
      c.n = (size_t)d->synthetic.test_samples;
      FL_TRY(fl_synth_images(&c, 1, &t->test));
    }
    break;
  }
  case FL_DATA_NPY:
    return load_npy(t);
  case FL_DATA_CRITEO:
    return load_stream(t);
  default:
    return FL_ERR(FL_ENOTSUP, "%s: data.format libsvm feeds the CTR model, which trains in ps mode",
                  job->source);
  }
  const int *shape = job->model.input_shape;
  if (t->train.channels != shape[0] || t->train.height != shape[1] || t->train.width != shape[2])
    return FL_ERR(FL_EINVAL, "%s: training images are %dx%dx%d but model.input_shape is [%d, %d, %d]",
                  d->format == FL_DATA_IDX ? d->train_images : job->source, t->train.channels,
                  t->train.height, t->train.width, shape[0], shape[1], shape[2]);
  if (t->have_test && t->test.dim != t->train.dim)
    return FL_ERR(FL_EINVAL, "%s: test images have %zu pixels, training images %zu",
                  d->format == FL_DATA_IDX ? d->test_images : job->source, t->test.dim,
                  t->train.dim);
  double mean, std;
  fl_dataset_mean_std(&t->train, &mean, &std);
  if (std > 0.0) {
    FL_TRY(fl_dataset_normalize(&t->train, mean, std));
    if (t->have_test) FL_TRY(fl_dataset_normalize(&t->test, mean, std));
  }
  set_augment(t, 1, std > 0.0 ? (float)(-mean / std) : 0.0f);
  FL_LOGI("data: %zu training and %zu test samples of %zu values (mean %.4f, std %.4f)",
          t->train.n, t->have_test ? t->test.n : 0, t->train.dim, mean, std);
  return FL_OK;
}

/* data.validation_x/_y or validation_inputs/_y: npy files of the
 * training files' form. */
static fl_status load_val_files(trainer *t) {
  const fl_job_data *d = &t->job->data;
  const fl_job_model *jm = &t->job->model;
  const int lnc = fl_model_kind_has(jm->kind, FL_KIND_FILE) ? 0 : jm->num_classes;
  const char *vx = d->n_validation_inputs ? d->validation_inputs[0].path : d->validation_x;
  if (d->n_validation_inputs)
    FL_TRY(load_named_set(t, d->validation_inputs, d->n_validation_inputs, d->validation_y, 0,
                          lnc, &t->val));
  else
    FL_TRY(fl_npy_load(d->validation_x, d->validation_y, lnc, d->scale, 0, &t->val));
  if (t->val.dim != t->train.dim || !t->val.y != !t->train.y || t->val.tdim != t->train.tdim ||
      t->val.ylen != t->train.ylen)
    return FL_ERR(FL_EINVAL, "%s: validation samples have %zu values and %s, the training "
                  "samples %zu and %s; give them the training files' form", vx, t->val.dim,
                  t->val.y ? "class ids" : "float targets", t->train.dim,
                  t->train.y ? "class ids" : "float targets");
  t->vset = &t->val;
  t->vn = t->val.n;
  return FL_OK;
}

/* The validation set: the last data.validation_split of the training
 * samples, before sharding (the loader then sees only the rest), or the
 * validation files. */
static fl_status load_validation(trainer *t) {
  const fl_job_data *d = &t->job->data;
  if (d->validation_x[0] || d->n_validation_inputs) {
    FL_TRY(load_val_files(t));
  } else if (d->validation_split > 0) {
    size_t held;
    FL_TRY(fl_val_split_count(t->train.n, d->validation_split, t->job->source, &held));
    t->train.n -= held;
    t->vset = &t->train;
    t->vfirst = t->train.n;
    t->vn = held;
  } else {
    return FL_OK;
  }
  char every[48] = "epoch";
  if (t->job->train.validate_every > 0)
    snprintf(every, sizeof every, "%" PRId64 " steps", t->job->train.validate_every);
  FL_LOGI("validation: %zu samples (%s), every %s", t->vn,
          d->validation_split > 0 ? "the training set's last ones" : "validation files", every);
  return FL_OK;
}

/* The model's inputs as "'a' (float), 'b' (int64)" for messages. */
static const char *model_inputs(const fl_model *m, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < fl_model_num_inputs(m) && len < cap; i++) {
    fl_model_input_info mi;
    if (fl_model_input_get(m, i, &mi) == FL_OK)
      len += (size_t)snprintf(buf + len, cap - len, "%s'%s' (%s)", i ? ", " : "", mi.name,
                              mi.dtype == FL_MODEL_I64 ? "int64" : "float");
  }
  return buf;
}

/* Model input mi fed by input k of the training set (and of the test
 * set): the same values per sample, converted to what it takes. */
static fl_status bind_one(trainer *t, const fl_model_input_info *mi, size_t k) {
  const fl_data_input *in = &t->train.inputs[k];
  size_t per = 1;
  for (int d = 1; d < mi->ndim; d++) per *= (size_t)mi->dims[d];
  if (per != in->dim)
    return FL_ERR(FL_EINVAL, "%s: input '%s' has %zu values per sample, the model's input takes "
                  "%zu", t->job->data.inputs[k].path, in->name, in->dim, per);
  const fl_data_elem el = mi->dtype == FL_MODEL_I64 ? FL_DATA_I64 : FL_DATA_F32;
  FL_TRY(fl_dataset_bind_input(&t->train, k, el, mi->cast_to_int));
  if (t->have_test) FL_TRY(fl_dataset_bind_input(&t->test, k, el, mi->cast_to_int));
  if (t->val.n_inputs) FL_TRY(fl_dataset_bind_input(&t->val, k, el, mi->cast_to_int));
  return FL_OK;
}

/* Named inputs against the built model: every model input fed, every
 * named input one of the model's.  Without data.inputs the model must
 * take one float input. */
static fl_status bind_inputs(trainer *t) {
  const fl_model *m = t->model;
  const size_t nm = fl_model_num_inputs(m);
  char list[512];
  fl_model_input_info mi;
  if (t->stream) return fl_stream_bind(t->stream, m, t->job->model.path);
  if (!t->train.n_inputs) {
    const int typed = nm == 1 && fl_model_input_get(m, 0, &mi) == FL_OK &&
                      mi.dtype != FL_MODEL_F32;
    if (nm > 1 || typed)
      return FL_ERR(FL_EINVAL, "%s: the model's inputs are %s: name each one's file in "
                    "data.inputs", t->job->source, model_inputs(m, list, sizeof list));
    return FL_OK;
  }
  for (size_t k = 0; k < t->train.n_inputs; k++) {
    size_t i = 0;
    while (i < nm && fl_model_input_get(m, i, &mi) == FL_OK &&
           strcmp(mi.name, t->train.inputs[k].name))
      i++;
    if (i == nm)
      return FL_ERR(FL_EINVAL, "%s: data.inputs names '%s', which is no input of %s (its inputs: "
                    "%s)", t->job->source, t->train.inputs[k].name, t->job->model.path,
                    model_inputs(m, list, sizeof list));
  }
  for (size_t i = 0; i < nm; i++) {
    FL_TRY(fl_model_input_get(m, i, &mi));
    size_t k = 0;
    while (k < t->train.n_inputs && strcmp(mi.name, t->train.inputs[k].name)) k++;
    if (k == t->train.n_inputs)
      return FL_ERR(FL_EINVAL, "%s: input '%s' of %s is not fed: name its file in data.inputs "
                    "(the model's inputs: %s)", t->job->source, mi.name, t->job->model.path,
                    model_inputs(m, list, sizeof list));
    FL_TRY(bind_one(t, &mi, k));
  }
  return FL_OK;
}

/* npy labels against the built model: class ids below its class count,
 * or exactly its output width of float targets per sample. */
static fl_status check_labels(const trainer *t) {
  const fl_job_data *d = &t->job->data;
  if (d->format != FL_DATA_NPY) return FL_OK;
  size_t k = (size_t)fl_model_get_spec(t->model)->num_classes;
  for (int s = 0; s < 1 + t->have_test; s++) {
    const fl_dataset *ds = s ? &t->test : &t->train;
    const char *name = s ? d->test_y : d->train_y;
    if (ds->t && ds->tdim != k)
      return FL_ERR(FL_EINVAL, "%s: %zu float targets per sample, the model's output has %zu",
                    name, ds->tdim, k);
    for (size_t i = 0; ds->y && !ds->n_inputs && i < ds->n; i++) /* named: checked per step */
      if ((size_t)ds->y[i] >= k)
        return FL_ERR(FL_EINVAL, "%s: label %d of sample %zu outside [0, %zu) (the model's "
                      "classes)", name, (int)ds->y[i], i, k);
  }
  return FL_OK;
}

/* ----------------------------------------------------------------- model */

/* train.device gpu: the model's device fields.  AMP runs GEMMs in
 * amp_configs.dtype (fp32 master weights are the host parameters; the loss
 * scaler below is the CPU's) for the op types of the white list, except
 * those of the black list (fl_model_spec.amp_white / amp_black, set from
 * the job whatever the device, so that the names are checked everywhere). */
static void device_spec(const fl_job *job, int device, fl_model_spec *s) {
  if (job->train.device != FL_DEVICE_GPU) return;
  snprintf(s->device, sizeof s->device, "%s", fl_train_device_names[FL_DEVICE_GPU]);
  s->device_id = device;
  if (job->strategy.amp)
    s->linear_math = s->conv_math =
        job->strategy.amp_configs.dtype == FL_AMP_BFLOAT16 ? FL_MATH_BF16 : FL_MATH_FP16;
}

void fl_trainer_model_spec(const fl_job *job, int device, const char *ck[FL_TRAINER_SPEC_NAMES],
                           fl_model_spec *out) {
  const fl_job_model *jm = &job->model;
  fl_model_spec s;
  memset(&s, 0, sizeof s);
  snprintf(s.kind, sizeof s.kind, "%s", jm->kind);
  s.in_channels = jm->input_shape[0];
  s.in_height = jm->input_shape[1];
  s.in_width = jm->input_shape[2];
  s.num_classes = jm->num_classes;
  s.n_hidden = jm->n_hidden < FL_MODEL_MAX_HIDDEN ? jm->n_hidden : FL_MODEL_MAX_HIDDEN;
  memcpy(s.hidden, jm->hidden, s.n_hidden * sizeof s.hidden[0]);
  snprintf(s.activation, sizeof s.activation, "%s", jm->activation);
  s.conv_channels[0] = jm->conv_channels[0];
  s.conv_channels[1] = jm->conv_channels[1];
  s.conv_kernel = jm->conv_kernel;
  s.fc_hidden = jm->fc_hidden;
  if (jm->norm != FL_NORM_NONE) snprintf(s.norm, sizeof s.norm, "%s", fl_norm_names[jm->norm]);
  s.gn_groups = jm->gn_groups;
  s.bn_momentum = jm->bn_momentum;
  s.bn_epsilon = jm->bn_epsilon;
  s.recompute = job->strategy.recompute;
  /* recompute_configs.checkpoints: graph tensor names bounding the segments */
  const size_t nck = job->strategy.recompute_configs.n_checkpoints;
  for (size_t i = 0; i < nck && i < FL_JOB_MAX_LIST; i++)
    ck[i] = job->strategy.recompute_configs.checkpoints[i];
  s.checkpoints = ck;
  s.n_checkpoints = nck < FL_JOB_MAX_LIST ? nck : FL_JOB_MAX_LIST;
  /* amp_configs lists: op types (ONNX or Paddle names) */
  if (job->strategy.amp) {
    const fl_strategy *st = &job->strategy;
    const char **white = ck + FL_JOB_MAX_LIST, **black = ck + 2 * FL_JOB_MAX_LIST;
    const size_t nw = st->amp_configs.n_white, nb = st->amp_configs.n_black;
    s.n_amp_white = nw < FL_JOB_MAX_LIST ? nw : FL_JOB_MAX_LIST;
    s.n_amp_black = nb < FL_JOB_MAX_LIST ? nb : FL_JOB_MAX_LIST;
    for (size_t i = 0; i < s.n_amp_white; i++) white[i] = st->amp_configs.custom_white_list[i];
    for (size_t i = 0; i < s.n_amp_black; i++) black[i] = st->amp_configs.custom_black_list[i];
    s.amp_white = white;
    s.amp_black = black;
  }
  snprintf(s.plugin_path, sizeof s.plugin_path, "%s", jm->plugin_path);
  snprintf(s.plugin_args, sizeof s.plugin_args, "%s", jm->plugin_args);
  snprintf(s.path, sizeof s.path, "%s", jm->path);
  snprintf(s.output, sizeof s.output, "%s", jm->output);
  s.loss = jm->loss;
  device_spec(job, device, &s);
  *out = s;
}

static fl_status build_model(trainer *t, size_t max_batch) {
  const fl_job_model *jm = &t->job->model;
  const char *ck[FL_TRAINER_SPEC_NAMES];
  fl_model_spec s;
  fl_trainer_model_spec(t->job, t->device, ck, &s);
  const fl_model_build_args a = {.job = t->job, .spec = &s, .max_batch = max_batch,
                                 .seed = t->job->train.seed, .train = &t->strain,
                                 .test = &t->stest};
  FL_TRY(fl_model_build(&a, &t->model));
  if (t->job->train.device == FL_DEVICE_GPU) {
    static const char *const math_names[] = {"fp32", "fp16", "bf16"};
    const fl_graph_options o = {.amp_math = s.linear_math, .amp_white = s.amp_white,
                                .n_amp_white = s.n_amp_white, .amp_black = s.amp_black,
                                .n_amp_black = s.n_amp_black};
    FL_LOGI("device: CUDA GPU %d; GEMMs: Gemm %s, Conv %s", t->device,
            math_names[fl_graph_amp_math("Gemm", &o)], math_names[fl_graph_amp_math("Conv", &o)]);
  }
  if (!t->train.n_inputs && !t->strain.n && !t->stream &&
      fl_model_input_size(t->model) != t->train.dim)
    return FL_ERR(FL_EINVAL, "%s: model %s takes %zu inputs per sample, the data has %zu",
                  t->job->source, jm->kind, fl_model_input_size(t->model), t->train.dim);
  return FL_OK;
}

/* Optimizer tensors, state and accumulators for the trainable parameters. */
static fl_status build_optimizer(trainer *t) {
  t->np = fl_model_num_params(t->model);
  for (size_t i = 0; i < t->np; i++) t->nt += fl_model_param(t->model, i)->grad != NULL;
  if (t->nt == 0) return FL_ERR(FL_EINVAL, "model %s has no trainable parameter", t->job->model.kind);
  t->tens = calloc(t->nt, sizeof *t->tens);
  t->tparam = calloc(t->nt, sizeof *t->tparam);
  t->gptr = calloc(t->nt, sizeof *t->gptr);
  t->gn = calloc(t->nt, sizeof *t->gn);
  t->acc = calloc(t->np, sizeof *t->acc);
  t->accp = calloc(t->nt, sizeof *t->accp);
  t->ready = calloc(t->np, 1);
  if (!t->tens || !t->tparam || !t->gptr || !t->gn || !t->acc || !t->accp || !t->ready)
    return FL_ERR(FL_ENOMEM, "optimizer: out of memory");
  size_t total = 0;
  for (size_t i = 0, j = 0; i < t->np; i++) {
    fl_param *p = fl_model_param(t->model, i);
    if (!p->grad) continue;
    t->tparam[j] = i;
    t->gptr[j] = p->grad;
    t->gn[j] = p->n;
    t->tens[j] = (fl_optim_tensor){.name = p->name, .param = p->value, .grad = p->grad, .n = p->n};
    total += p->n;
    j++;
  }
  int ns = fl_optim_state_count(t->hp.kind);
  if (ns > 0) {
    t->state = calloc(total * (size_t)ns, sizeof(float));
    if (!t->state) return FL_ERR(FL_ENOMEM, "optimizer: cannot allocate %zu state floats", total);
  }
  if (t->k > 1) {
    t->accbuf = calloc(total, sizeof(float));
    if (!t->accbuf) return FL_ERR(FL_ENOMEM, "gradient merge: cannot allocate %zu floats", total);
  }
  size_t off = 0;
  for (size_t j = 0; j < t->nt; j++) {
    size_t n = t->tens[j].n;
    if (ns >= 1) t->tens[j].state1 = t->state + off * (size_t)ns;
    if (ns >= 2) t->tens[j].state2 = t->state + off * (size_t)ns + n;
    if (t->accbuf) t->acc[t->tparam[j]] = t->accp[j] = t->accbuf + off;
    off += n;
  }
  return fl_optim_init_state(&t->hp, t->tens, t->nt);
}

/* ------------------------------------------------------------ checkpoints */

/* "lr/plateau": observed, bad, cooldown_left, best, lr */
#define PLATEAU_CKPT 5

/* The plateau state of a checkpoint (one written without it, by a run of
 * another schedule, leaves the schedule fresh). */
static fl_status load_plateau(trainer *t, const fl_ckpt *c, const char *path) {
  fl_ckpt_record rec;
  double v[PLATEAU_CKPT];
  if (t->sched.kind != FL_LR_PLATEAU) return FL_OK;
  if (fl_ckpt_find(c, "lr/plateau", &rec) != FL_OK) {
    FL_LOGW("%s has no reduce-on-plateau state: the plateau schedule starts afresh", path);
    return FL_OK;
  }
  FL_TRY(fl_ckpt_read(c, "lr/plateau", FL_CKPT_F64, 1, (int64_t[]){PLATEAU_CKPT}, v));
  fl_lr_plateau *pl = &t->sched.plateau;
  pl->observed = (int64_t)v[0], pl->bad = (int64_t)v[1], pl->cooldown_left = (int64_t)v[2];
  pl->best = v[3], pl->lr = v[4];
  return FL_OK;
}

/* "data/criteo_pos": rank, then fl_criteo_pos's epoch, emitted, file,
 * offset, file_line, line, skipped.  Rank 0 writes it; another rank that
 * resumes replays its share up to the batch (fl_stream_start). */
#define STREAM_POS 8

static void save_stream_pos(const trainer *t, fl_ckpt_writer *w) {
  fl_criteo_pos p;
  if (!t->stream) return;
  fl_stream_tell(t->stream, &p);
  const int64_t v[STREAM_POS] = {t->rank, p.epoch, (int64_t)p.emitted, (int64_t)p.file,
                                 (int64_t)p.offset, (int64_t)p.file_line, (int64_t)p.line,
                                 (int64_t)p.skipped};
  fl_ckpt_put(w, "data/criteo_pos", FL_CKPT_I64, 1, (int64_t[]){STREAM_POS}, v);
}

static fl_status load_stream_pos(trainer *t, const fl_ckpt *c) {
  fl_ckpt_record rec;
  int64_t v[STREAM_POS];
  if (!t->stream || fl_ckpt_find(c, "data/criteo_pos", &rec) != FL_OK) return FL_OK;
  FL_TRY(fl_ckpt_read(c, "data/criteo_pos", FL_CKPT_I64, 1, (int64_t[]){STREAM_POS}, v));
  if (v[0] != t->rank) return FL_OK;
  t->spos = (fl_criteo_pos){.epoch = v[1], .emitted = (uint64_t)v[2], .file = (uint32_t)v[3],
                            .offset = (uint64_t)v[4], .file_line = (uint64_t)v[5],
                            .line = (uint64_t)v[6], .skipped = (uint64_t)v[7]};
  t->have_spos = 1;
  return FL_OK;
}

/* "valid/trackers": keep_best's and early_stopping's best, best_step, bad */
#define TRACKERS_CKPT 6

/* Everything a checkpoint holds into w (a failed put is reported by the
 * commit). */
static void put_state(trainer *t, fl_ckpt_writer *w) {
  char name[FL_MODEL_NAME_MAX + 16];
  fl_ckpt_put_blob(w, "meta/format", CKPT_FORMAT, strlen(CKPT_FORMAT));
  if (t->id) fl_run_identity_put(w, t->id);
  fl_ckpt_put_blob(w, "meta/model", t->job->model.kind, strlen(t->job->model.kind));
  fl_ckpt_put_i64(w, "meta/step", t->step);
  fl_ckpt_put_i64(w, "meta/updates", t->updates);
  fl_ckpt_put_i64(w, "meta/epoch", t->epoch);
  fl_ckpt_put_i64(w, "meta/batch", t->batch);
  fl_ckpt_put_i64(w, "meta/steps_per_epoch", t->steps_per_epoch);
  fl_ckpt_put_i64(w, "meta/k_steps", t->k);
  fl_ckpt_put_i64(w, "meta/world_size", t->world);
  fl_ckpt_put_i64(w, "meta/epoch_offset", t->epoch_off);
  fl_ckpt_put_i64(w, "meta/base_world", t->base_world);
  fl_ckpt_put_i64(w, "rng/shuffle_seed", (int64_t)t->job->train.seed);
  for (size_t i = 0; i < t->np; i++) {
    fl_param *p = fl_model_param(t->model, i);
    snprintf(name, sizeof name, "param/%s", p->name);
    fl_ckpt_put(w, name, FL_CKPT_F32, p->ndim, p->shape, p->value);
    if (t->acc[i]) {
      snprintf(name, sizeof name, "accum/%s", p->name);
      fl_ckpt_put(w, name, FL_CKPT_F32, p->ndim, p->shape, t->acc[i]);
    }
  }
  for (size_t j = 0; j < t->nt; j++) {
    fl_param *p = fl_model_param(t->model, t->tparam[j]);
    if (t->tens[j].state1) {
      snprintf(name, sizeof name, "optim/%s/1", p->name);
      fl_ckpt_put(w, name, FL_CKPT_F32, p->ndim, p->shape, t->tens[j].state1);
    }
    if (t->tens[j].state2) {
      snprintf(name, sizeof name, "optim/%s/2", p->name);
      fl_ckpt_put(w, name, FL_CKPT_F32, p->ndim, p->shape, t->tens[j].state2);
    }
  }
  fl_ckpt_put(w, "amp/scale", FL_CKPT_F32, 0, NULL, &t->scaler.scale);
  fl_ckpt_put_i64(w, "amp/good_steps", t->scaler.good_steps);
  fl_ckpt_put_i64(w, "amp/bad_steps", t->scaler.bad_steps);
  if (t->sched.kind == FL_LR_PLATEAU) {
    const fl_lr_plateau *pl = &t->sched.plateau;
    double v[PLATEAU_CKPT] = {(double)pl->observed, (double)pl->bad, (double)pl->cooldown_left,
                              pl->best, pl->lr};
    fl_ckpt_put(w, "lr/plateau", FL_CKPT_F64, 1, (int64_t[]){PLATEAU_CKPT}, v);
  }
  save_stream_pos(t, w);
  if (t->vn) {
    const double v[TRACKERS_CKPT] = {t->best.best, (double)t->best.best_step, (double)t->best.bad,
                                     t->stop.best, (double)t->stop.best_step, (double)t->stop.bad};
    fl_ckpt_put(w, "valid/trackers", FL_CKPT_F64, 1, (int64_t[]){TRACKERS_CKPT}, v);
  }
  if (t->ops->ckpt_save) t->ops->ckpt_save(t->self, w);
}

static fl_status save_checkpoint(trainer *t) {
  fl_ckpt_writer *w;
  if ((t->rank != 0 && !t->node_ckpt) || !t->ckdir[0] || t->last_saved == t->step) return FL_OK;
  FL_TRY(fl_ckpt_dir_begin(t->ckdir, t->step, &w));
  put_state(t, w);
  FL_TRY(fl_ckpt_writer_commit(w)); /* reports the first failed put, if any */
  t->last_saved = t->step;
  FL_LOGI("checkpoint: step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 ") saved in %s",
          t->step, t->epoch, t->batch, t->ckdir);
  return fl_ckpt_dir_prune(t->ckdir, t->job->train.checkpoint_keep);
}

static fl_status get_i64(const fl_ckpt *c, const char *path, const char *name, int64_t *v) {
  fl_status st = fl_ckpt_get_i64(c, name, v);
  if (st == FL_ENOTFOUND)
    return FL_ERR(FL_ECORRUPT, "%s: checkpoint has no record %s", path, name);
  return st;
}

/* keep_best's model of step into the snapshot, from best.flc (verified
 * on load: a corrupt one is an error); a missing one, or one of another
 * step (a run that went on past it without a checkpoint), is left with a
 * warning and keep_best starts afresh. */
static fl_status load_best(trainer *t, int64_t step) {
  char path[FL_JOB_PATH_MAX + 16], name[FL_MODEL_NAME_MAX + 16];
  fl_ckpt *c = NULL;
  int64_t saved = -1;
  snprintf(path, sizeof path, "%s/" FL_TRAINER_BEST_FILE, t->ckdir);
  fl_status st = access(path, F_OK) == 0 ? fl_ckpt_load(path, &c) : FL_OK;
  if (st == FL_OK && c) st = fl_ckpt_get_i64(c, "meta/step", &saved);
  if (st == FL_OK && saved != step) {
    FL_LOGW("%s %s step %" PRId64 ", the checkpoint's best: keep_best starts afresh", path,
            c ? "does not hold" : "is missing, with", step);
    t->best.best = NAN;
    t->best.best_step = -1;
  } else if (st == FL_OK) {
    st = fl_val_snapshot_take(&t->snap, t->model, step);
    for (size_t i = 0, o = 0; st == FL_OK && i < t->np; i++) {
      fl_param *p = fl_model_param(t->model, i);
      snprintf(name, sizeof name, "param/%s", p->name);
      st = fl_ckpt_read(c, name, FL_CKPT_F32, p->ndim, p->shape, t->snap.values + o);
      o += p->n;
    }
  }
  fl_ckpt_free(c);
  return st;
}

/* The validation trackers of a checkpoint (one without them leaves them
 * fresh) and keep_best's model. */
static fl_status load_valid(trainer *t, const fl_ckpt *c) {
  fl_ckpt_record rec;
  double v[TRACKERS_CKPT];
  if (!t->vn || fl_ckpt_find(c, "valid/trackers", &rec) != FL_OK) return FL_OK;
  FL_TRY(fl_ckpt_read(c, "valid/trackers", FL_CKPT_F64, 1, (int64_t[]){TRACKERS_CKPT}, v));
  t->best.best = v[0], t->best.best_step = (int64_t)v[1], t->best.bad = (int64_t)v[2];
  t->stop.best = v[3], t->stop.best_step = (int64_t)v[4], t->stop.bad = (int64_t)v[5];
  if (t->job->train.keep_best == FL_VAL_NONE || t->best.best_step < 0) return FL_OK;
  return load_best(t, t->best.best_step);
}

/* The position saved in c: step, updates, epoch and micro-batch.  A
 * checkpoint of the same world size must have this run's steps per epoch.
 * One of another world size (an elastic restart: flotilla-run
 * --rdzv_backend etcd) resumes mid-epoch right after the samples that
 * world took: they are the first epoch_offset + batch x batch_size x its
 * world positions of the epoch's permutation (fl_data.h), so this world
 * shares out the rest (fl_shard_spec.offset) and no sample is seen twice. */
static fl_status load_position(trainer *t, const fl_ckpt *c, const char *path) {
  int64_t spe, world, off = 0, ks;
  fl_ckpt_record rec;
  FL_TRY(get_i64(c, path, "meta/steps_per_epoch", &spe));
  FL_TRY(get_i64(c, path, "meta/world_size", &world));
  FL_TRY(get_i64(c, path, "meta/k_steps", &ks));
  if (world == t->world && ks != t->k)
    return FL_ERR(FL_EINVAL, "%s: saved with gradient-merge k_steps %" PRId64 ", the job has %d",
                  path, ks, t->k);
  if (fl_ckpt_find(c, "meta/epoch_offset", &rec) == FL_OK)
    FL_TRY(get_i64(c, path, "meta/epoch_offset", &off));
  t->base_world = world;
  if (fl_ckpt_find(c, "meta/base_world", &rec) == FL_OK)
    FL_TRY(get_i64(c, path, "meta/base_world", &t->base_world));
  if (t->base_world < 1) return FL_ERR(FL_ECORRUPT, "%s: base world %" PRId64 " is invalid", path,
                                       t->base_world);
  if (world == t->world && spe != t->steps_per_epoch)
    return FL_ERR(FL_EINVAL, "%s: saved with %" PRId64 " steps per epoch, this run has %" PRId64
                  " (different data or batch size)", path, spe, t->steps_per_epoch);
  FL_TRY(get_i64(c, path, "meta/step", &t->step));
  FL_TRY(get_i64(c, path, "meta/updates", &t->updates));
  FL_TRY(get_i64(c, path, "meta/epoch", &t->epoch));
  FL_TRY(get_i64(c, path, "meta/batch", &t->batch));
  /* a stream (data.format criteo) keeps its own position (load_stream_pos) */
  int64_t n = t->stream ? INT64_MAX : (int64_t)(t->strain.n ? t->strain.n : t->train.n);
  if (world != t->world && t->stream)
    return FL_ERR(FL_ENOTSUP, "%s: saved by %" PRId64 " ranks; streamed data (data.format "
                  "criteo) resumes with the same number of ranks only, here %d", path, world,
                  t->world);
  if (t->epoch < 0 || t->batch < 0 || ks < 1 || t->batch % ks != 0 || t->batch / ks > spe ||
      world < 1 || off < 0 || off >= n)
    return FL_ERR(FL_ECORRUPT, "%s: position epoch %" PRId64 " batch %" PRId64 " offset %" PRId64
                  " is invalid", path, t->epoch, t->batch, off);
  if (world != t->world) {
    int64_t taken = off + t->batch * (int64_t)t->job->train.batch_size * world;
    FL_LOGI("elastic resume: a world of %" PRId64 " ranks took %" PRId64 " samples of epoch %"
            PRId64 "; these %d ranks share out the other %" PRId64, world, taken, t->epoch,
            t->world, n > taken ? n - taken : 0);
    off = taken < n ? taken : n - 1;
    t->batch = 0;
    if (t->k == t->k0)
      FL_LOGI("elastic resume: the learning rate scales by %d/%" PRId64 " (this world / the "
              "run's first)", t->world, t->base_world);
  }
  t->epoch_off = off;
  return FL_OK;
}

/* Every rank gives mine (>= 0); *max gets the highest of them and *root the
 * lowest rank that gave it (-1 when every one gave 0). */
static fl_status highest(trainer *t, double mine, int64_t *max, int *root) {
  double *v = calloc((size_t)t->world, sizeof *v), best = 0;
  if (!v) return FL_ERR(FL_ENOMEM, "rank %d: no memory for %d ranks' values", t->rank, t->world);
  v[t->rank] = mine;
  fl_status st = t->ops->reduce_metrics(t->self, v, (size_t)t->world);
  *root = -1;
  for (int r = 0; st == FL_OK && r < t->world; r++)
    if (v[r] > best) best = v[r], *root = r;
  free(v);
  *max = (int64_t)best;
  return st;
}

/* FLOTILLA_NODE_CHECKPOINTS=1 (set by flotilla-run's elastic agent): every
 * node keeps its own checkpoint_dir, written by its local rank 0 (the
 * survivors' memory of the state when the agent restarts their trainers;
 * share_state hands it to the nodes without one). */
static int node_checkpoints(void) {
  const char *v = getenv("FLOTILLA_NODE_CHECKPOINTS"), *lr = getenv("FLOTILLA_LOCAL_RANK");
  return v && !strcmp(v, "1") && (!lr || !lr[0] || !strcmp(lr, "0"));
}

/* The state this process kept across a world change (opts->state) into
 * *c; the caller frees it. */
static fl_status open_kept_state(const fl_trainer_options *o, fl_ckpt **c) {
  return fl_ckpt_load_mem(o->state, o->state_len, "this process's state (world change)", c);
}

/* elastic.keep_global_batch: in a world other than the run's first (the
 * newest checkpoint's meta/base_world), gradient merge k becomes
 * k0 x first world / world, so that the global batch stays; when that does
 * not divide, k stays and the LR scales with the global batch. */
static fl_status keep_global_batch(trainer *t, const fl_trainer_options *o) {
  fl_ckpt *c;
  fl_ckpt_record rec;
  int64_t w0 = 0;
  int root;
  if (!t->job->elastic.keep_global_batch || o->fresh || t->ps) return FL_OK;
  if (o->state ? open_kept_state(o, &c) == FL_OK
               : t->ckdir[0] && fl_ckpt_dir_load_latest(t->ckdir, &c, NULL) == FL_OK) {
    const char *key = fl_ckpt_find(c, "meta/base_world", &rec) == FL_OK ? "meta/base_world"
                                                                          : "meta/world_size";
    if (fl_ckpt_get_i64(c, key, &w0) != FL_OK) w0 = 0;
    fl_ckpt_free(c);
  }
  /* a node without a checkpoint of its own takes the others' first world */
  if (t->world > 1) FL_TRY(highest(t, (double)(w0 > 0 ? w0 : 0), &w0, &root));
  if (w0 < 1 || w0 == t->world) return FL_OK;
  if ((int64_t)t->k0 * w0 % t->world) {
    FL_LOGW("elastic.keep_global_batch: k %d x first world %" PRId64 " is no multiple of this "
            "world %d: k stays, the learning rate scales with the global batch", t->k0, w0,
            t->world);
    return FL_OK;
  }
  t->k = (int)((int64_t)t->k0 * w0 / t->world);
  if (t->k0 == 1) t->avg = 1; /* the merged gradient stands for one batch of k x B */
  FL_LOGI("elastic.keep_global_batch: a world of %d after %" PRId64 ": gradient merge k %d "
          "(the job's %d), global batch %" PRId64 " x %zu", t->world, w0, t->k, t->k0,
          (int64_t)t->world * t->k, t->job->train.batch_size);
  return FL_OK;
}

/* The newest checkpoint of the directory into *c (NULL: none to take),
 * when the directory's checkpoints are this run's or `start` says to take
 * them (fl_ckpt_dir_claim); its path into path. */
static fl_status find_checkpoint(trainer *t, fl_ckpt_start start, fl_ckpt **c, char *path,
                                 size_t cap) {
  int64_t step = 0;
  *c = NULL;
  if (!t->ckdir[0]) {
    if (start != FL_CKPT_START_RESUME) return FL_OK;
    /* ps mode: the servers hold the parameters and the step */
    if (t->ps) return FL_OK;
    return FL_ERR(FL_EINVAL, "--resume needs train.checkpoint_dir (or FLOTILLA_CHECKPOINT_DIR)");
  }
  if (t->id) {
    FL_TRY(fl_ckpt_dir_claim(t->ckdir, t->id, start, t->rank == 0 || t->node_ckpt, c, &step));
  } else {
    if (start != FL_CKPT_START_RESUME) return FL_OK;
    fl_status st = fl_ckpt_dir_load_latest(t->ckdir, c, &step);
    if (st == FL_ENOTFOUND) {
      FL_LOGW("--resume: no checkpoint in %s, starting from scratch", t->ckdir);
      return FL_OK;
    }
    FL_TRY(st);
  }
  if (*c) fl_ckpt_dir_path(t->ckdir, step, path, cap);
  return FL_OK;
}

/* Restore everything put_state wrote from checkpoint c (named path in
 * messages); c stays the caller's. */
static fl_status apply_checkpoint(trainer *t, const fl_ckpt *c, const char *path) {
  int64_t v;
  char name[FL_MODEL_NAME_MAX + 16];
  fl_ckpt_record rec;
  fl_status st = fl_ckpt_find(c, "meta/format", &rec);
  if (st != FL_OK || rec.nbytes != strlen(CKPT_FORMAT) || memcmp(rec.data, CKPT_FORMAT, rec.nbytes)) {
    st = FL_ERR(FL_EPROTO, "%s: not a flotilla-trainer checkpoint", path);
    goto done;
  }
  if ((st = get_i64(c, path, "rng/shuffle_seed", &v)) != FL_OK) goto done;
  if ((uint64_t)v != t->job->train.seed) {
    st = FL_ERR(FL_EINVAL, "%s: saved with train.seed %" PRIu64 ", the job has %" PRIu64, path,
                (uint64_t)v, t->job->train.seed);
    goto done;
  }
  if ((st = load_position(t, c, path)) != FL_OK) goto done;
  for (size_t i = 0; i < t->np; i++) {
    fl_param *p = fl_model_param(t->model, i);
    snprintf(name, sizeof name, "param/%s", p->name);
    if ((st = fl_ckpt_read(c, name, FL_CKPT_F32, p->ndim, p->shape, p->value)) != FL_OK) goto done;
    snprintf(name, sizeof name, "accum/%s", p->name);
    /* at a step boundary the accumulators are zero; a checkpoint of
     * another k (elastic.keep_global_batch) may have none */
    if (t->acc[i] && fl_ckpt_find(c, name, &rec) == FL_OK &&
        (st = fl_ckpt_read(c, name, FL_CKPT_F32, p->ndim, p->shape, t->acc[i])) != FL_OK)
      goto done;
  }
  for (size_t j = 0; j < t->nt; j++) {
    fl_param *p = fl_model_param(t->model, t->tparam[j]);
    if (t->tens[j].state1) {
      snprintf(name, sizeof name, "optim/%s/1", p->name);
      if ((st = fl_ckpt_read(c, name, FL_CKPT_F32, p->ndim, p->shape, t->tens[j].state1)) != FL_OK)
        goto done;
    }
    if (t->tens[j].state2) {
      snprintf(name, sizeof name, "optim/%s/2", p->name);
      if ((st = fl_ckpt_read(c, name, FL_CKPT_F32, p->ndim, p->shape, t->tens[j].state2)) != FL_OK)
        goto done;
    }
  }
  if ((st = fl_ckpt_read(c, "amp/scale", FL_CKPT_F32, 0, NULL, &t->scaler.scale)) != FL_OK)
    goto done;
  if ((st = get_i64(c, path, "amp/good_steps", &v)) != FL_OK) goto done;
  t->scaler.good_steps = (int)v;
  if ((st = get_i64(c, path, "amp/bad_steps", &v)) != FL_OK) goto done;
  t->scaler.bad_steps = (int)v;
  if ((st = load_plateau(t, c, path)) != FL_OK || (st = load_stream_pos(t, c)) != FL_OK ||
      (st = load_valid(t, c)) != FL_OK)
    goto done;
  t->last_saved = t->step;
  FL_LOGI("resumed from %s: step %" PRId64 ", epoch %" PRId64 ", batch %" PRId64, path, t->step,
          t->epoch, t->batch);
done:
  return st;
}

/* Restore the state this process kept across a world change, else the
 * newest checkpoint of the directory, if any (find_checkpoint); *held: 1
 * when one was restored. */
static fl_status load_checkpoint(trainer *t, const fl_trainer_options *o, fl_ckpt_start start,
                                 int *held) {
  fl_ckpt *c;
  char path[FL_JOB_PATH_MAX + 64] = "this process's state (world change)";
  *held = 0;
  if (o->state) FL_TRY(open_kept_state(o, &c));
  else FL_TRY(find_checkpoint(t, start, &c, path, sizeof path));
  if (!c) return FL_OK;
  fl_status st = apply_checkpoint(t, c, path);
  fl_ckpt_free(c);
  *held = st == FL_OK;
  return st;
}

/* ------------------------------------------------------------ elastic state */

/* Rank root's state to every rank: root serializes everything put_state
 * writes (the checkpoint writer, into memory: the same format as on disk),
 * broadcasts its length and bytes, and the others restore it as they would
 * the file. */
static fl_status send_state(trainer *t, int root) {
  void *buf = NULL;
  size_t len = 0;
  char name[64];
  if (t->rank == root) {
    fl_ckpt_writer *w;
    FL_TRY(fl_ckpt_writer_open_mem(&w));
    put_state(t, w);
    FL_TRY(fl_ckpt_writer_commit_mem(w, &buf, &len));
  }
  uint64_t n = len;
  fl_status st = t->ops->broadcast(t->self, &n, sizeof n, root);
  if (st == FL_OK && t->rank != root && !(buf = malloc(n ? n : 1)))
    st = FL_ERR(FL_ENOMEM, "rank %d: no memory for rank %d's state (%" PRIu64 " bytes)", t->rank,
                root, n);
  if (st == FL_OK) st = t->ops->broadcast(t->self, buf, (size_t)n, root);
  if (st == FL_OK && t->rank != root) {
    fl_ckpt *c;
    snprintf(name, sizeof name, "rank %d's state (%" PRIu64 " bytes over the collective)", root, n);
    st = fl_ckpt_load_mem(buf, (size_t)n, name, &c);
    if (st == FL_OK) st = apply_checkpoint(t, c, name);
    fl_ckpt_free(c);
  }
  free(buf);
  return st;
}

/* FNV-1a 64 over n bytes, from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * UINT64_C(0x100000001b3);
  return h;
}

/* A digest of the parameters and the optimizer state, logged after a
 * state transfer: equal on every rank when they hold the same bits. */
static uint64_t state_digest(const trainer *t) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < t->np; i++) {
    fl_param *p = fl_model_param(t->model, i);
    h = fnv(h, p->value, p->n * sizeof(float));
  }
  for (size_t j = 0; j < t->nt; j++) {
    size_t n = fl_model_param(t->model, t->tparam[j])->n * sizeof(float);
    if (t->tens[j].state1) h = fnv(h, t->tens[j].state1, n);
    if (t->tens[j].state2) h = fnv(h, t->tens[j].state2, n);
  }
  return h;
}

/* The ranks of a new world start from the newest state any of them holds
 * (collective mode, world > 1).  Each rank restored the newest checkpoint
 * of its own checkpoint_dir that is this run's (fl_ckpt_dir_claim), or none
 * (a joining node's empty directory); they tell each other its step (held
 * 0: none), and the lowest rank of the highest step hands its state to all
 * (send_state), so that they go on from identical bits without a shared
 * directory.  No rank holding any: a fresh start for all. */
static fl_status share_state(trainer *t, int held) {
  int64_t newest, mine = held ? t->step : -1;
  int root;
  FL_TRY(highest(t, held ? (double)t->step + 1 : 0, &newest, &root));
  if (root < 0) return FL_OK;
  if (t->rank == root)
    FL_LOGI("elastic state: this rank holds the newest state (step %" PRId64 "): sending it to "
            "the %d other rank(s)", newest - 1, t->world - 1);
  FL_TRY(send_state(t, root));
  if (t->rank != root && mine < 0)
    FL_LOGI("elastic state: took rank %d's state: step %" PRId64 " (this rank held none)", root,
            t->step);
  else if (t->rank != root)
    FL_LOGI("elastic state: took rank %d's state: step %" PRId64 " (this rank held step %" PRId64
            ")", root, t->step, mine);
  FL_LOGI("elastic state: step %" PRId64 ", parameters and optimizer state digest %016" PRIx64,
          t->step, state_digest(t));
  return FL_OK;
}

/* ------------------------------------------------------------------ steps */

/* The model reports parameter i's gradient final for this micro-batch: on
 * the last micro-batch of a step, merge it and hand it on. */
static void on_grad_ready(void *ctx, size_t i) {
  trainer *t = ctx;
  fl_param *p;
  if (i >= t->np || t->ready[i]) return;
  p = fl_model_param(t->model, i);
  if (!p->grad) return;
  t->ready[i] = 1;
  if (t->acc[i]) {
    float *g = p->grad;
    const float *a = t->acc[i];
    fl_status st = fl_gm_accumulate(&g, &a, &p->n, 1); /* g + acc == acc + g, bit for bit */
    if (st == FL_OK) st = fl_gm_finalize(&g, &p->n, 1, t->k, t->avg);
    if (st != FL_OK && t->cb_err == FL_OK)
      t->cb_err = FL_ERR(st, "gradient merge of %s failed", p->name);
    memset(t->acc[i], 0, p->n * sizeof(float));
  }
  if (!t->clip_before_sync) t->ops->grad_ready(t->self, t->model, i);
}

/* optimizer.grad_clip on the gradient of this step: merged, averaged over
 * the ranks (collective: after step_end) and unscaled (AMP), right before
 * the update; in ps sync/async mode, where the servers apply it, on this
 * trainer's merged gradient before the push (early: the call before
 * step_end, which then hands every gradient on).  Called at both points;
 * acts at the one that fits the mode. */
static fl_status clip_grads(trainer *t, int early) {
  double norm;
  if (t->clip.kind == FL_CLIP_NONE || early != t->clip_before_sync) return FL_OK;
  fl_status st = fl_clip_grads(&t->clip, t->gptr, t->gn, t->nt, &norm);
  if (st != FL_OK)
    return FL_ERR(st, "step %" PRId64 ": optimizer.grad_clip (kind %s) rejected the gradients",
                  t->step + 1, fl_clip_kind_names[t->clip.kind]);
  if (t->clip.kind != FL_CLIP_VALUE && !isfinite(norm) && !t->clip_warned) {
    t->clip_warned = 1;
    FL_LOGW("step %" PRId64 ": gradient norm is %g: optimizer.grad_clip leaves nan gradients, as "
            "torch's clip_grad_norm_ does (reported once; lower the lr or use strategy.amp)",
            t->step + 1, norm);
  }
  for (size_t q = t->nt; early && q-- > 0;) t->ops->grad_ready(t->self, t->model, t->tparam[q]);
  return FL_OK;
}

static void log_line(trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(trainer *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(t->log, fmt, ap);
  va_end(ap);
  fflush(t->log);
}

/* a += b, every field. */
static void add_result(fl_model_result *a, const fl_model_result *b) {
  a->loss_sum += b->loss_sum, a->correct1 += b->correct1, a->correct5 += b->correct5;
  a->count += b->count, a->values += b->values;
  a->abs_err += b->abs_err, a->t_sum += b->t_sum, a->t_sq += b->t_sq;
}

/* The log lines' metrics after "loss: X", the ones that fit the task:
 * binary targets (auc given): ", auc: A, logloss: L" over all ranks;
 * regression (loss mse): ", mse: M, mae: A, r2: R" (R² over all target
 * values, nan when the targets do not vary); otherwise ", acc1: A" and,
 * for class ids with more than 5 classes (with 5 or fewer it is always
 * 1), ", acc5: A" as before. */
static void metrics_text(const trainer *t, const fl_model_result *r, const fl_auc_result *auc,
                         char *buf, size_t cap) {
  const double c = r->count ? (double)r->count : 1.0;
  if (auc) { /* binary targets: exact over all ranks' predictions */
    snprintf(buf, cap, ", auc: %.5f, logloss: %.5f", auc->auc, auc->logloss);
    return;
  }
  if (r->values) {
    const double n = (double)r->values, mse = r->loss_sum / c, mean = r->t_sum / n;
    const double var = r->t_sq / n - mean * mean;
    snprintf(buf, cap, ", mse: %.5f, mae: %.5f, r2: %.5f", mse, r->abs_err / n,
             var > 0 ? 1.0 - mse / var : NAN);
    return;
  }
  int len = snprintf(buf, cap, ", acc1: %.5f", (double)r->correct1 / c);
  if (!fl_model_float_targets(t->model) && fl_model_get_spec(t->model)->num_classes > 5)
    snprintf(buf + len, cap - (size_t)len, ", acc5: %.5f", (double)r->correct5 / c);
}

/* The feed of named inputs data[k] (as the dataset d feeds them), class
 * ids y (d's ylen per sample) or float targets tg. */
static void make_feed(const trainer *t, const fl_dataset *d, const void *const *data,
                      const int32_t *y, const float *tg, fl_model_input *in, fl_model_feed *f) {
  for (size_t k = 0; k < d->n_inputs; k++)
    in[k] = (fl_model_input){.name = d->inputs[k].name, .dtype = (int)d->inputs[k].elem,
                             .data = data[k]};
  *f = (fl_model_feed){.inputs = in, .n_inputs = d->n_inputs, .y = y,
                       .ylen = d->ylen ? d->ylen : 1, .ignore_index = t->job->model.ignore_index,
                       .t = tg};
}

/* One eval batch of d's named inputs (samples off .. off+cnt-1). */
static fl_status eval_named(trainer *t, const fl_dataset *d, size_t off, size_t cnt,
                            fl_model_result *res) {
  const size_t bs = t->job->train.eval_batch_size, yl = d->ylen ? d->ylen : 1;
  fl_model_input in[FL_DATA_MAX_INPUTS];
  fl_model_feed f;
  for (size_t k = 0; k < d->n_inputs; k++) {
    if (!t->evalin[k] && !(t->evalin[k] = malloc(bs * d->inputs[k].dim * sizeof(int64_t))))
      return FL_ERR(FL_ENOMEM, "eval: cannot allocate %zu x %zu values of input %s", bs,
                    d->inputs[k].dim, d->inputs[k].name);
    fl_dataset_input_rows(d, k, off, cnt, t->evalin[k]);
  }
  make_feed(t, d, (const void *const *)t->evalin, d->y ? d->y + off * yl : NULL,
            d->t ? d->t + off * d->tdim : NULL, in, &f);
  if (t->sparse) { /* the rows read read-only first */
    fl_batch b = {.size = cnt, .y = f.y, .t = f.t, .n_inputs = d->n_inputs, .ylen = f.ylen};
    memcpy(b.inputs, t->evalin, d->n_inputs * sizeof b.inputs[0]);
    return fl_sparse_run_eval_batch(t->sparse, &b, cnt, res);
  }
  return fl_model_eval_feed(t->model, &f, cnt, res);
}

/* The next training micro-batch, from the stream or the loader (also the
 * sparse run's source, as fl_sparse_next_fn). */
static fl_status next_batch(void *ctx, fl_batch *b) {
  trainer *t = ctx;
  return t->stream ? fl_stream_next(t->stream, b) : fl_loader_next(t->loader, b);
}

/* One optimizer step: k micro-batches, merge, sync, update. */
static fl_status train_step(trainer *t, fl_step_report *rep) {
  fl_model_result sum = {0};
  float scale = t->amp ? t->scaler.scale : 1.0f;
  int apply = 0, skip = 0;

  FL_TRY(t->ops->step_begin(t->self, t->model, t->step));
  for (int j = 0; j < t->k; j++) {
    fl_batch b;
    fl_model_result res = {0};
    int last = j == t->k - 1;
    FL_TRY(t->sparse ? fl_sparse_run_next(t->sparse, t->step, &b) : next_batch(t, &b));
    if (last) memset(t->ready, 0, t->np);
    t->cb_err = FL_OK;
    /* dropout masks follow the checkpointed position (bitwise --resume) */
    fl_model_set_step(t->model, (uint64_t)t->step * (uint64_t)t->k + (uint64_t)j);
    if (t->sparse) { /* rows pulled before, their gradients pushed after */
      FL_TRY(fl_model_train_sparse(t->model, fl_sparse_run_slot(t->sparse), b.size, scale,
                                   last ? on_grad_ready : NULL, t, &res));
      FL_TRY(fl_sparse_run_push(t->sparse, t->step));
    } else if (b.n_inputs) { /* named inputs: a feed */
      fl_model_input in[FL_DATA_MAX_INPUTS];
      fl_model_feed f;
      make_feed(t, t->stream ? fl_stream_inputs(t->stream) : &t->train, b.inputs, b.y, b.t, in,
                &f);
      FL_TRY(fl_model_train_feed(t->model, &f, b.size, scale, last ? on_grad_ready : NULL, t,
                                 &res));
    } else if (b.t) /* float targets (bce / mse models) */
      FL_TRY(fl_model_train_stepf(t->model, b.x, b.t, b.size, scale,
                                  last ? on_grad_ready : NULL, t, &res));
    else
      FL_TRY(fl_model_train_step(t->model, b.x, b.y, b.size, scale,
                                 last ? on_grad_ready : NULL, t, &res));
    if (!last) {
      FL_TRY(fl_gm_accumulate(t->accp, (const float *const *)t->gptr, t->gn, t->nt));
    } else {
      /* parameters the model did not report (e.g. a plugin without
       * callbacks) are merged and handed on now, in reverse order */
      for (size_t q = t->nt; q-- > 0;) on_grad_ready(t, t->tparam[q]);
      FL_TRY(t->cb_err);
      FL_TRY(clip_grads(t, 1));
    }
    add_result(&sum, &res);
    t->batch++;
    if (t->job->train.log_interval > 0 && b.index % (size_t)t->job->train.log_interval == 0) {
      double c = res.count ? (double)res.count : 1.0;
      char mt[96];
      metrics_text(t, &res, NULL, mt, sizeof mt);
      log_line(t, "[Epoch %" PRId64 ", batch %zu] loss: %.5f%s\n", t->epoch, b.index,
               res.loss_sum / c, mt);
    }
  }
  FL_TRY(t->ops->step_end(t->self, t->model, t->step, &apply));
  /* an elastic run's world may differ from its first: the global batch
   * did, the LR follows it (linear scaling rule) */
  float lr = fl_lr_at(&t->sched, t->step) * (float)(t->world * t->k) /
             (float)(t->base_world * t->k0);
  if (apply) {
    if (t->amp) {
      int found_inf = 0;
      FL_TRY(fl_amp_check_finite_and_unscale(t->gptr, t->gn, t->nt, scale, &found_inf));
      FL_TRY(fl_loss_scaler_update(&t->scaler, found_inf, &skip));
      if (skip)
        FL_LOGW("step %" PRId64 ": inf/nan gradients at loss scale %g, update skipped (scale now %g)",
                t->step + 1, (double)scale, (double)t->scaler.scale);
    }
    if (!skip) {
      FL_TRY(clip_grads(t, 0));
      FL_TRY(fl_optim_step(&t->hp, t->tens, t->nt, lr, t->updates + 1));
      t->updates++;
    }
  }
  t->step++;
  double c = sum.count ? (double)sum.count : 1.0;
  *rep = (fl_step_report){.epoch = t->epoch, .step = t->step, .loss = sum.loss_sum / c,
                          .acc1 = (double)sum.correct1 / c, .acc5 = (double)sum.correct5 / c,
                          .lr = lr, .loss_scale = scale, .skipped = skip,
                          .pull_wait = t->sparse ? fl_sparse_run_step_end(t->sparse) : 0};
  return FL_OK;
}

/* The sums a test-set evaluation reduces over the ranks, in and out of
 * an array. */
#define EVAL_SUMS 8
static void result_to_sums(const fl_model_result *r, double *v) {
  const double f[EVAL_SUMS] = {r->loss_sum, (double)r->correct1, (double)r->correct5,
                               (double)r->count, (double)r->values, r->abs_err, r->t_sum, r->t_sq};
  for (int i = 0; i < EVAL_SUMS; i++) v[i] += f[i];
}

static fl_model_result sums_to_result(const double *v) {
  return (fl_model_result){.loss_sum = v[0], .correct1 = (size_t)v[1], .correct5 = (size_t)v[2],
                           .count = (size_t)v[3], .values = (size_t)v[4], .abs_err = v[5],
                           .t_sum = v[6], .t_sq = v[7]};
}

/* The rank's share of the test files, streamed (data.format criteo). */
static fl_status eval_stream(trainer *t, double *v) {
  const fl_dataset *d = fl_stream_inputs(t->tstream);
  FL_TRY(fl_stream_start(t->tstream, 0, 0, 0, NULL));
  for (;;) {
    fl_batch b;
    fl_model_result res = {0};
    fl_model_input in[FL_DATA_MAX_INPUTS];
    fl_model_feed f;
    FL_TRY(fl_stream_next(t->tstream, &b));
    if (b.size == 0) return FL_OK;
    make_feed(t, d, b.inputs, b.y, b.t, in, &f);
    FL_TRY(t->sparse ? fl_sparse_run_eval_batch(t->sparse, &b, b.size, &res)
                     : fl_model_eval_feed(t->model, &f, b.size, &res));
    result_to_sums(&res, v);
  }
}

/* One eval batch of d (samples off .. off+cnt-1) through the model. */
static fl_status eval_batch(trainer *t, const fl_dataset *d, size_t off, size_t cnt,
                            fl_model_result *res) {
  const size_t bs = t->job->train.eval_batch_size;
  if (d->n_inputs) return eval_named(t, d, off, cnt, res);
  if (!d->x && !t->evalx) { /* uint8 features: converted per eval batch */
    t->evalx = malloc(bs * d->dim * sizeof(float));
    if (!t->evalx) return FL_ERR(FL_ENOMEM, "eval: cannot allocate %zu x %zu floats", bs, d->dim);
  }
  const float *x = fl_dataset_rows(d, off, cnt, t->evalx);
  if (d->t) return fl_model_evalf(t->model, x, d->t + off * d->tdim, cnt, res);
  return fl_model_eval(t->model, x, d->y ? d->y + off : NULL, cnt, res);
}

/* A binary model's (probability, target) pairs of the batch just
 * evaluated (samples off .. off+cnt-1 of d) into acc. */
static fl_status add_pairs(const trainer *t, const fl_dataset *d, size_t off, size_t cnt,
                           fl_auc_acc *acc) {
  const float *logit = fl_model_logits(t->model);
  const size_t k = d->tdim, n = cnt * k;
  float p[256];
  if (!logit) return FL_ERR(FL_ESTATE, "eval: model %s gives no logits", t->job->model.kind);
  for (size_t i = 0; i < n; i += 256) {
    const size_t m = n - i < 256 ? n - i : 256;
    for (size_t j = 0; j < m; j++) p[j] = 1.0f / (1.0f + expf(-logit[i + j]));
    FL_TRY(fl_auc_add(acc, p, d->t + off * k + i, m));
  }
  return FL_OK;
}

/* The ranks agree on their batch-norm statistics (not in chunk mode:
 * each trainer evaluates alone). */
static fl_status agree_buffers(trainer *t) {
  return t->chunks ? FL_OK : fl_val_agree_buffers(t->sync, t->model);
}

/* Samples [first, first + n) of d evaluated over all ranks, after the
 * ranks agreed on their batch-norm statistics: each rank a contiguous
 * slice, sums reduced into *all; a binary model's pairs gathered and
 * merged into *auc.  In chunk mode this trainer evaluates all of them. */
static fl_status eval_set(trainer *t, const fl_dataset *d, size_t first, size_t n,
                          fl_model_result *all, fl_auc_result *auc) {
  const int alone = t->chunks != NULL;
  const size_t w = alone ? 1 : (size_t)t->world, r = alone ? 0 : (size_t)t->rank;
  const size_t bs = t->job->train.eval_batch_size;
  const size_t lo = first + n * r / w, hi = first + n * (r + 1) / w;
  double v[EVAL_SUMS] = {0};
  fl_auc_acc mine = {0}, every = {0};
  fl_status st = agree_buffers(t);
  for (size_t off = lo; st == FL_OK && off < hi; off += bs) {
    const size_t cnt = hi - off < bs ? hi - off : bs;
    fl_model_result res = {0};
    st = eval_batch(t, d, off, cnt, &res);
    if (st == FL_OK && t->binary) st = add_pairs(t, d, off, cnt, &mine);
    result_to_sums(&res, v);
  }
  if (st == FL_OK && !alone) st = t->ops->reduce_metrics(t->self, v, EVAL_SUMS);
  if (st == FL_OK && t->binary && !alone)
    st = fl_auc_gather(t->sync, &mine, (lo - first) * d->tdim, n * d->tdim, &every);
  const fl_auc_acc *pairs = alone ? &mine : &every;
  if (st == FL_OK && t->binary)
    st = fl_auc_merge(&(fl_auc_part){pairs->score, pairs->label, pairs->n}, 1, auc);
  fl_auc_acc_free(&mine);
  fl_auc_acc_free(&every);
  *all = sums_to_result(v);
  return st;
}

/* Test-set metrics over all ranks. */
static fl_status evaluate(trainer *t, fl_trainer_report *rep) {
  fl_model_result all;
  fl_auc_result auc;
  if (t->sparse && !t->tstream && (t->stest.n || fl_sparse_run_auc(t->sparse)))
    return fl_sparse_run_eval(t->sparse, &t->stest, &t->test, t->epoch, t->log, rep);
  if (t->tstream) {
    double v[EVAL_SUMS] = {0};
    FL_TRY(eval_stream(t, v));
    if (!t->chunks) FL_TRY(t->ops->reduce_metrics(t->self, v, EVAL_SUMS));
    all = sums_to_result(v);
  } else {
    FL_TRY(eval_set(t, &t->test, 0, t->test.n, &all, &auc));
  }
  double c = all.count ? (double)all.count : 1.0;
  rep->evaluated = 1;
  rep->test_loss = all.loss_sum / c;
  rep->test_acc1 = (double)all.correct1 / c;
  rep->test_acc5 = (double)all.correct5 / c;
  const fl_auc_result *bin = t->binary && !t->tstream ? &auc : NULL; /* streamed: no pairs */
  double v[FL_VAL_COUNT];
  fl_val_values(&all, bin, v);
  fl_val_publish("test", v);
  char mt[96];
  metrics_text(t, &all, bin, mt, sizeof mt);
  log_line(t, "[Epoch %" PRId64 "] test loss: %.5f%s\n", t->epoch, rep->test_loss, mt);
  return FL_OK;
}

/* lr_schedule kind plateau: hand it this evaluation's metric (the same on
 * every rank: reduce_metrics summed it): the validation's when there is a
 * validation set (val), else the test set's (val NULL). */
static fl_status observe_metric(trainer *t, const fl_trainer_report *rep, const double *val) {
  static const fl_val_metric as_val[] = {[FL_LR_METRIC_LOSS] = FL_VAL_LOSS,
                                         [FL_LR_METRIC_ACC1] = FL_VAL_ACC1,
                                         [FL_LR_METRIC_ACC5] = FL_VAL_ACC5};
  if (t->sched.kind != FL_LR_PLATEAU) return FL_OK;
  fl_lr_metric m = t->job->lr_schedule.metric;
  double v = val                         ? val[as_val[m]]
             : m == FL_LR_METRIC_LOSS ? rep->test_loss
             : m == FL_LR_METRIC_ACC1 ? rep->test_acc1 : rep->test_acc5;
  int reduced = 0;
  if (fl_lr_plateau_observe(&t->sched, v, &reduced) != FL_OK)
    return FL_ERR(FL_EINVAL, "lr_schedule kind plateau: invalid schedule");
  if (reduced)
    FL_LOGI("[Epoch %" PRId64 "] %s %s %.5f: no improvement for %lld evaluations, lr now %g",
            t->epoch, val ? "val" : "test", fl_lr_metric_names[m], v,
            (long long)t->sched.plateau.patience + 1, t->sched.plateau.lr);
  return FL_OK;
}

/* train.keep_best: this validation's value v of the metric improved on
 * the best: keep a copy of the model on every rank (the final test and
 * export take it) and, on rank 0 with a checkpoint directory, write it to
 * best.flc beside the newest checkpoints. */
static fl_status keep_best(trainer *t, double v) {
  FL_TRY(fl_val_snapshot_take(&t->snap, t->model, t->step));
  if (t->rank != 0 || !t->ckdir[0]) return FL_OK;
  char path[FL_JOB_PATH_MAX + 16];
  fl_ckpt_writer *w;
  snprintf(path, sizeof path, "%s/" FL_TRAINER_BEST_FILE, t->ckdir);
  FL_TRY(fl_ckpt_dir_begin_named(t->ckdir, FL_TRAINER_BEST_FILE, &w));
  put_state(t, w);
  const char *name = fl_val_metric_names[t->job->train.keep_best];
  fl_ckpt_put_blob(w, "best/metric", name, strlen(name));
  fl_ckpt_put(w, "best/value", FL_CKPT_F64, 0, NULL, &v);
  FL_TRY(fl_ckpt_writer_commit(w));
  FL_LOGI("keep_best: step %" PRId64 " has the best %s so far (%.5f), saved in %s", t->step, name,
          v, path);
  return FL_OK;
}

/* The value of the tracker's metric in this validation's v, NaN (warned)
 * when the task does not give it. */
static double tracked(const fl_val_tracker *k, const double *v, const char *key) {
  if (isnan(v[k->metric]))
    FL_LOGW("%s %s: this validation gives nan (not a metric of this task, or a validation set "
            "with one class): counted as no improvement", key, fl_val_metric_names[k->metric]);
  return v[k->metric];
}

/* After a validation with metrics v: keep the best, count towards early
 * stopping (the values are the same on every rank, so every rank decides
 * alike). */
static fl_status after_validation(trainer *t, const double *v) {
  const fl_job_train *jt = &t->job->train;
  if (jt->keep_best != FL_VAL_NONE) {
    const double b = tracked(&t->best, v, "train.keep_best");
    if (fl_val_tracker_observe(&t->best, b, t->step)) FL_TRY(keep_best(t, b));
  }
  if (jt->early_stopping.metric == FL_VAL_NONE) return FL_OK;
  fl_val_tracker_observe(&t->stop, tracked(&t->stop, v, "train.early_stopping.metric"),
                         t->step);
  if (!fl_val_tracker_stop(&t->stop)) return FL_OK;
  t->early_stopped = 1;
  FL_LOGI("early stopping at step %" PRId64 ": %s has not improved by more than %g for %" PRId64
          " validations (best %.5f at step %" PRId64 ")", t->step,
          fl_val_metric_names[t->stop.metric], jt->early_stopping.min_delta, t->stop.bad,
          t->stop.best, t->stop.best_step);
  return FL_OK;
}

/* The validation set over all ranks: logged as "[Epoch e] val loss: ...
 * (step s)", then the plateau schedule, keep-best and early stopping. */
static fl_status validate(trainer *t, fl_trainer_report *rep) {
  fl_model_result all;
  fl_auc_result auc;
  char mt[96];
  FL_TRY(eval_set(t, t->vset, t->vfirst, t->vn, &all, &auc));
  fl_val_values(&all, t->binary ? &auc : NULL, rep->val);
  fl_val_publish("val", rep->val);
  rep->validated = 1;
  metrics_text(t, &all, t->binary ? &auc : NULL, mt, sizeof mt);
  log_line(t, "[Epoch %" PRId64 "] val loss: %.5f%s (step %" PRId64 ")\n", t->epoch,
           rep->val[FL_VAL_LOSS], mt, t->step);
  FL_TRY(observe_metric(t, rep, rep->val));
  return after_validation(t, rep->val);
}

/* Whether a validation is due now: every train.validate_every steps
 * within an epoch, or (0) at each epoch's end. */
static int validation_due(const trainer *t, int epoch_end) {
  const int64_t every = t->job->train.validate_every;
  if (!t->vn) return 0;
  return every > 0 ? !epoch_end && t->step % every == 0 : epoch_end;
}

/* After a resume every rank must stand at the same position (they read
 * the checkpoint rank 0 wrote; a rank that found none would start over). */
static fl_status check_same_position(trainer *t) {
  double v[3] = {(double)t->step, (double)t->epoch, (double)t->batch};
  double mine[3] = {v[0], v[1], v[2]};
  FL_TRY(t->ops->reduce_metrics(t->self, v, 3));
  for (int i = 0; i < 3; i++)
    if (v[i] != mine[i] * t->world)
      return FL_ERR(FL_ESTATE, "rank %d resumed at step %" PRId64 " but the ranks disagree (is %s "
                    "shared by every rank?)", t->rank, t->step, t->ckdir);
  return FL_OK;
}

/* ps mode, a trainer rejoining a running job: go on from the servers' step
 * (their parameters were pulled by init_params), whatever the checkpoint
 * said.  A step at an epoch's end stands before that epoch's evaluation, so
 * that this trainer meets the others in it. */
static fl_status catch_up(trainer *t, int64_t step) {
  if (step < 0) return FL_ERR(FL_EPROTO, "the pservers report step %" PRId64, step);
  if (step == t->step) return FL_OK;
  int64_t from = t->step;
  t->step = step;
  t->epoch = step / t->steps_per_epoch;
  t->batch = (step % t->steps_per_epoch) * t->k;
  if (t->batch == 0 && t->epoch > 0) {
    t->epoch--;
    t->batch = t->steps_per_epoch * t->k;
  }
  t->updates = step;
  t->last_saved = -1;
  FL_LOGI("rejoining the running job at step %" PRId64 " (epoch %" PRId64
          ", batch %" PRId64 "), from step %" PRId64 " of %s", step, t->epoch, t->batch, from,
          from ? "this trainer's checkpoint" : "a fresh start");
  return FL_OK;
}

static void set_threads(int n) {
  if (n <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > 0 ? (int)c : 1;
  }
  openblas_set_num_threads(n);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  FL_LOGI("threads: %d for BLAS and kernels", n);
}

static void trainer_free(trainer *t) {
  fl_chunks_close(t->chunks);
  fl_loader_destroy(t->loader);
  fl_stream_close(t->stream);
  fl_stream_close(t->tstream);
  fl_sparse_run_free(t->sparse);
  fl_model_destroy(t->model);
  fl_dataset_free(&t->train);
  fl_dataset_free(&t->test);
  fl_sparse_dataset_free(&t->strain);
  fl_sparse_dataset_free(&t->stest);
  free(t->evalx);
  for (size_t k = 0; k < FL_DATA_MAX_INPUTS; k++) free(t->evalin[k]);
  free(t->tens);
  free(t->tparam);
  free(t->gptr);
  free(t->gn);
  free(t->acc);
  free(t->accp);
  free(t->ready);
  free(t->state);
  free(t->accbuf);
  fl_dataset_free(&t->val);
  fl_val_snapshot_free(&t->snap);
  free(t->bufsnap);
}

/* ------------------------------------------------------------ elastic worlds */

/* The round in the agent's world file (opts->world_file), 0 when it holds
 * none (the agent renames a whole new file over it: one read sees one
 * whole line). */
static int64_t world_file_round(const char *path) {
  long long r = 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (fscanf(f, "%lld", &r) != 1) r = 0;
  fclose(f);
  return (int64_t)r;
}

static int world_newer(const fl_trainer_options *o) {
  return o->world_file && world_file_round(o->world_file) > o->world_round;
}

/* What the ranks do after this step: go on, stop (opts->stop: a signal)
 * or stop for a newer world (the world file).  In collective mode every
 * rank asks at the same steps (a multiple of FL_TRAINER_STOP_EVERY) and
 * they act when any rank was asked; a stop wins over a new world. */
enum { AGREE_GO, AGREE_STOP, AGREE_WORLD };
static int agree(trainer *t, const fl_trainer_options *o, fl_status *st) {
  int stop = o->stop && *o->stop != 0;
  if (t->world == 1 || t->ps) return stop ? AGREE_STOP : AGREE_GO;
  if ((!o->stop && !o->world_file) || t->step % FL_TRAINER_STOP_EVERY != 0) return AGREE_GO;
  double v[2] = {stop, world_newer(o)};
  *st = t->ops->reduce_metrics(t->self, v, 2);
  if (*st != FL_OK) return AGREE_GO;
  return v[0] > 0 ? AGREE_STOP : v[1] > 0 ? AGREE_WORLD : AGREE_GO;
}

/* Stop for the next world: this rank's whole state, as put_state writes it
 * (the checkpoint format, in memory), into the report for fl_trainer_run
 * in the new world; t0: when training stopped. */
static fl_status keep_for_world(trainer *t, fl_trainer_report *rep, double t0) {
  fl_ckpt_writer *w;
  FL_TRY(fl_ckpt_writer_open_mem(&w));
  put_state(t, w);
  FL_TRY(fl_ckpt_writer_commit_mem(w, &rep->state, &rep->state_len));
  rep->world_changed = 1;
  rep->world_t0 = t0;
  FL_LOGI("elastic: stopped at step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 ") for the "
          "next world; pid %ld keeps the state, digest %016" PRIx64, t->step, t->epoch, t->batch,
          (long)getpid(), state_digest(t));
  return FL_OK;
}

/* The failures of a collective a dead or stopped peer causes. */
static int peer_failure(fl_status st) {
  return st == FL_ECLOSED || st == FL_ETIMEDOUT || st == FL_EPROTO;
}

/* With a world file, wait for the agent's next round after a collective
 * failed with st (`when`: where, for the log; a dead node's lease runs
 * out first), up to world_wait_s: FL_OK once it is named; else, or when
 * none comes, st. */
static fl_status await_world(const fl_trainer_options *o, const char *when, fl_status st) {
  double t0 = clock_s(CLOCK_MONOTONIC);
  if (!o->world_file || !peer_failure(st)) return st;
  FL_LOGW("elastic: a collective %s failed: waiting up to %.0f s for the next world "
          "(FLOTILLA_ELASTIC_WAIT_S)", when, o->world_wait_s);
  while (!world_newer(o)) {
    if ((o->stop && *o->stop) || clock_s(CLOCK_MONOTONIC) - t0 > o->world_wait_s) {
      FL_LOGE("elastic: no next world within %.0f s after the failed collective: ending",
              o->world_wait_s);
      return st;
    }
    usleep(50 * 1000);
  }
  return FL_OK;
}

/* A collective of the step after t->step (or of an evaluation after it)
 * failed with st (logged where it happened).  With a world file, this
 * rank waits at its last completed step for the agent's next round and
 * stops for it, keeping its state; else, or when none comes, st. */
static fl_status lost_world(trainer *t, const fl_trainer_options *o, fl_trainer_report *rep,
                            fl_status st) {
  double t0 = clock_s(CLOCK_MONOTONIC);
  char when[48];
  snprintf(when, sizeof when, "after step %" PRId64, t->step);
  fl_status w = await_world(o, when, st);
  return w != FL_OK ? w : keep_for_world(t, rep, t0);
}

/* A collective of this round's start failed with st before its state was
 * loaded (the ranks agreeing on the steps): as lost_world, but what goes
 * on to the next world is the state this round came with, unchanged: a
 * copy of o->state (caller frees rep->state), or none when the round
 * started from disk or fresh (the next one then starts the same way). */
static fl_status lost_world_at_start(const fl_trainer_options *o, fl_trainer_report *rep,
                                     fl_status st) {
  fl_status w = await_world(o, "before this round's first step", st);
  if (w != FL_OK) return w;
  if (o->state) {
    rep->state = malloc(o->state_len);
    if (!rep->state) return FL_ERR(FL_ENOMEM, "elastic: %zu bytes to keep the state", o->state_len);
    memcpy(rep->state, o->state, o->state_len);
    rep->state_len = o->state_len;
  }
  rep->world_changed = 1;
  rep->world_t0 = o->state ? o->world_t0 : clock_s(CLOCK_MONOTONIC);
  FL_LOGI("elastic: stopped before this round's first step for the next world; pid %ld keeps %s",
          (long)getpid(), o->state ? "the state it came with" : "no state (it starts as this round did)");
  return FL_OK;
}

/* Copy the buffers (parameters without a gradient: batch-norm running
 * statistics, which forward updates) to or from t->bufsnap. */
static void copy_buffers(trainer *t, int save) {
  float *q = t->bufsnap;
  for (size_t i = 0; q && i < t->np; i++) {
    fl_param *p = fl_model_param(t->model, i);
    if (p->grad) continue;
    memcpy(save ? q : p->value, save ? p->value : q, p->n * sizeof(float));
    q += p->n;
  }
}

/* Elastic in process: room to keep the buffers at each step's start. */
static fl_status alloc_bufsnap(trainer *t) {
  size_t n = 0;
  for (size_t i = 0; i < t->np; i++) {
    fl_param *p = fl_model_param(t->model, i);
    if (!p->grad) n += p->n;
  }
  if (n && !(t->bufsnap = malloc(n * sizeof(float))))
    return FL_ERR(FL_ENOMEM, "rank %d: no memory to keep %zu buffer values per step", t->rank, n);
  return FL_OK;
}

/* Undo what a step that failed in a collective did to this rank: the
 * micro-batches it took (the position goes back to the step's start), the
 * gradients merged so far and forward's updates of the buffers.  The
 * parameters and the optimizer state are untouched: the update comes
 * after the allreduce (train_step). */
static void undo_step(trainer *t, int64_t batch0) {
  t->batch = batch0;
  for (size_t i = 0; i < t->np; i++)
    if (t->acc[i]) memset(t->acc[i], 0, fl_model_param(t->model, i)->n * sizeof(float));
  copy_buffers(t, 0);
}

/* Where a run stopped by a signal stands, and where its state is. */
static void log_stopped(const trainer *t) {
  char where[FL_JOB_PATH_MAX + 64] = "";
  if (t->sparse) /* the rows are the pservers', whatever the checkpoint holds */
    snprintf(where, sizeof where, "; the %s model's state is the pservers'", t->job->model.kind);
  else if (t->rank == 0 && t->ckdir[0])
    snprintf(where, sizeof where, "; --resume continues from its checkpoint");
  else if (!t->ckdir[0])
    snprintf(where, sizeof where, "; no checkpoint_dir: the progress is not kept");
  FL_LOGI("stopped by a signal at step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 ")%s",
          t->step, t->epoch, t->batch, where);
}

/* Begin the epoch at t->batch: the loader, or the stream (at the position
 * a resumed checkpoint gave, once). */
static fl_status start_epoch(trainer *t) {
  if (!t->stream) return fl_loader_start(t->loader, t->epoch, (size_t)t->batch);
  fl_status st = fl_stream_start(t->stream, t->epoch, (size_t)t->batch, t->job->train.batch_size,
                                 t->have_spos ? &t->spos : NULL);
  t->have_spos = 0;
  return st;
}

/* The validation trackers from the job, and whether evaluations give auc
 * and log loss (a bce_with_logits model on the host). */
static void start_validation(trainer *t) {
  const fl_job_train *jt = &t->job->train;
  fl_val_tracker_init(&t->best, jt->keep_best, 0.0, 0);
  fl_val_tracker_init(&t->stop, jt->early_stopping.metric, jt->early_stopping.min_delta,
                      jt->early_stopping.patience);
  t->binary = fl_model_binary(t->model) && jt->device != FL_DEVICE_GPU;
  if (jt->keep_best != FL_VAL_NONE && !t->ckdir[0])
    FL_LOGW("train.keep_best %s without a checkpoint directory: the best model is kept in "
            "memory only (for the final test and export)", fl_val_metric_names[jt->keep_best]);
}

/* The model the run ends with, on every rank, before the mode finishes:
 * with train.keep_best the best validation's (restored, then tested
 * again), and in every mode the ranks' batch-norm statistics agreed, so
 * the export holds the model the last test line measured. */
static fl_status final_model(trainer *t, fl_trainer_report *rep) {
  rep->early_stopped = t->early_stopped;
  rep->best_step = t->snap.step;
  if (t->sparse) return FL_OK;
  if (t->snap.step < 0 || t->snap.step == t->step) return agree_buffers(t);
  fl_val_snapshot_restore(&t->snap, t->model);
  FL_LOGI("keep_best: the final test and export use the model of step %" PRId64 " (%s %.5f)",
          t->snap.step, fl_val_metric_names[t->best.metric], t->best.best);
  if (t->have_test) return evaluate(t, rep);
  return agree_buffers(t);
}

/* Chunk mode: start at the first epoch whose chunks are not all done
 * (etcd knows; a checkpoint's or the pservers' step does not: the
 * trainers' steps differ), from its start (a chunk is trained whole). */
static fl_status chunks_first_epoch(trainer *t) {
  int64_t e;
  FL_TRY(fl_chunks_first_epoch(t->chunks, 0, t->job->train.epochs, &e));
  if (e != t->epoch || t->batch) t->last_saved = -1;
  t->epoch = e;
  t->batch = 0;
  return FL_OK;
}

/* Chunk mode's start: max_steps bounds the job's steps (fl_chunks_limit),
 * not this trainer's, so *max_steps becomes 0 and *epochs the epochs the
 * bound leaves; then the first epoch not done. */
static fl_status chunks_start(trainer *t, int64_t *max_steps, int64_t *epochs) {
  fl_chunks_limit(t->chunks, *max_steps);
  *epochs = fl_chunks_epochs(t->chunks, *epochs);
  *max_steps = 0;
  if (t->sparse) fl_sparse_run_chunk(t->sparse, 0);
  return chunks_first_epoch(t);
}

/* Chunk mode: the sample source of the next step (the loader restarts at
 * a newly claimed chunk); *more 0 when the epoch's chunks are all done. */
static fl_status chunk_step(trainer *t, int *more) {
  int64_t at;
  /* a model with sparse tables: the chunk's last push acknowledged before
   * the chunk is marked done (its pulls never run past the chunk) */
  if (t->sparse && fl_chunks_left(t->chunks) == 0) FL_TRY(fl_sparse_run_drain(t->sparse));
  FL_TRY(fl_chunks_next_step(t->chunks, t->epoch, &at, more));
  if (at < 0) return FL_OK;
  const int64_t micro = (fl_chunks_left(t->chunks) + 1) * t->k;
  if (t->sparse) fl_sparse_run_chunk(t->sparse, micro);
  if (t->stream) { /* batches of the counted epoch, sought */
    const size_t b0 = (size_t)at / t->job->train.batch_size;
    return fl_stream_range(t->stream, t->epoch, b0, b0 + (size_t)micro);
  }
  FL_TRY(fl_loader_set_offset(t->loader, (size_t)at));
  return fl_loader_start(t->loader, t->epoch, 0);
}

/* Chunk mode, stopped by a signal after a step: the chunk's pushes
 * acknowledged, then its progress left on etcd for the next claimer. */
static fl_status chunks_leave(trainer *t) {
  if (t->sparse) FL_TRY(fl_sparse_run_drain(t->sparse));
  return fl_chunks_leave(t->chunks);
}

/* The epoch's validation and test.  Their collectives fail like a step's
 * when a peer dies: the caller then joins the next world (lost_world) at
 * the epoch's end, and that world evaluates again. */
static fl_status epoch_end_evals(trainer *t, fl_trainer_report *rep, int stopped) {
  static int held;
  const char *hold = getenv("FLOTILLA_TEST_STOP_AT_EVAL"); /* tests: a peer lost mid-evaluation */
  if (!held++ && hold && hold[0]) {
    FL_LOGW("FLOTILLA_TEST_STOP_AT_EVAL: stopped before the epoch's evaluation");
    fflush(NULL);
    raise(SIGSTOP);
  }
  if (validation_due(t, 1) && !stopped) FL_TRY(validate(t, rep));
  if (t->have_test) FL_TRY(evaluate(t, rep));
  if (t->have_test && !t->vn) FL_TRY(observe_metric(t, rep, NULL));
  return FL_OK;
}

/* Train epochs from the current position until the end or max_steps. */
static fl_status run_epochs(trainer *t, const fl_trainer_options *o, fl_trainer_report *rep) {
  const fl_job *job = t->job;
  int64_t max_steps = o->max_steps > 0 ? o->max_steps : job->train.max_steps;
  int64_t interval = job->train.checkpoint_interval, epochs = job->train.epochs;

  if (t->chunks) FL_TRY(chunks_start(t, &max_steps, &epochs));
  if (t->sparse) fl_sparse_run_limit(t->sparse, t->steps_per_epoch, max_steps);
  while (t->epoch < epochs) {
    if (max_steps > 0 && t->step >= max_steps) break;
    int64_t first = t->batch / t->k, epoch_steps = t->chunks ? INT64_MAX : t->steps_per_epoch;
    int stopped = 0;
    if (t->epoch_off && t->loader) { /* an elastic resume's partial epoch */
      FL_TRY(fl_loader_set_offset(t->loader, (size_t)t->epoch_off));
      epoch_steps = (int64_t)fl_loader_batches(t->loader) / t->k;
    }
    if (!t->chunks) FL_TRY(start_epoch(t));
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    int64_t samples = 0, steps = 0;
    for (int64_t s = first; s < epoch_steps; s++) {
      if (max_steps > 0 && t->step >= max_steps) {
        stopped = 1;
        break;
      }
      fl_step_report r;
      int more = 1;
      if (t->chunks) FL_TRY(chunk_step(t, &more));
      if (!more) break; /* every chunk of the epoch is done */
      int64_t batch0 = t->batch;
      copy_buffers(t, 1);
      fl_status sst = train_step(t, &r);
      if (sst != FL_OK) {
        undo_step(t, batch0);
        return lost_world(t, o, rep, sst);
      }
      samples += (int64_t)(t->k * job->train.batch_size);
      steps++;
      if (o->on_step) o->on_step(o->on_step_ctx, &r);
      int act = agree(t, o, &sst);
      if (act == AGREE_STOP) {
        if (t->chunks) FL_TRY(chunks_leave(t));
        FL_TRY(save_checkpoint(t));
        log_stopped(t);
        rep->stopped = 1;
        return FL_OK;
      }
      if (act == AGREE_WORLD) return keep_for_world(t, rep, clock_s(CLOCK_MONOTONIC));
      if (sst != FL_OK) return lost_world(t, o, rep, sst);
      if (validation_due(t, 0) && (sst = validate(t, rep)) != FL_OK)
        return lost_world(t, o, rep, sst);
      if (t->early_stopped) {
        stopped = 1;
        break;
      }
      if (interval > 0 && t->step % interval == 0 && s + 1 < epoch_steps)
        FL_TRY(save_checkpoint(t));
    }
    double dt = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    rep->train_seconds += dt;
    rep->train_samples += samples;
    if (steps > 0) /* cpu: all threads of the process, prefetch included */
      log_line(t, "[Epoch %" PRId64 "] train: %" PRId64 " steps, %" PRId64 " samples, %.2f s, "
               "%.1f samples/s, cpu %.2f s\n", t->epoch, steps, samples, dt,
               dt > 0 ? (double)samples / dt : 0.0, cpu);
    if (t->sparse) FL_TRY(fl_sparse_run_epoch_end(t->sparse, t->epoch, t->log));
    fl_status est = epoch_end_evals(t, rep, stopped);
    if (est != FL_OK) return lost_world(t, o, rep, est);
    if (stopped) {
      FL_TRY(save_checkpoint(t));
      break;
    }
    t->epoch++;
    t->batch = 0;
    if (t->epoch_off) FL_TRY(fl_loader_set_offset(t->loader, 0));
    t->epoch_off = 0;
    rep->epochs_done = t->epoch;
    FL_TRY(save_checkpoint(t));
    if (t->early_stopped) break;
  }
  if (max_steps > 0 && t->step >= max_steps) FL_TRY(save_checkpoint(t));
  return FL_OK;
}

/* The loader over the data in memory (none for a stream). */
static fl_status make_loader(trainer *t) {
  const fl_job *job = t->job;
  if (t->stream) return FL_OK;
  const int whole = chunk_mode(t); /* chunks of the whole epoch, not a rank's share */
  fl_shard_spec spec = {.n = t->strain.n ? t->strain.n : t->train.n,
                        .batch_size = job->train.batch_size, .rank = whole ? 0 : t->rank,
                        .world_size = whole ? 1 : t->world, .seed = job->train.seed,
                        .shuffle = job->data.shuffle, .remainder = FL_REMAINDER_DROP};
  FL_TRY(fl_shard_check(&spec));
  FL_TRY(fl_loader_create(t->strain.n ? NULL : &t->train, t->strain.n ? &t->strain : NULL, &spec,
                          (size_t)job->data.prefetch, &t->loader));
  if (t->strain.n) return FL_OK;
  return fl_loader_set_augment(t->loader, &t->aug, job->data.format == FL_DATA_NPY
                                                       ? job->data.train_x : job->source);
}

/* Chunk mode: the claims on etcd, once the steps of a whole epoch are
 * known. */
static fl_status open_chunks(trainer *t) {
  if (!chunk_mode(t)) return FL_OK;
  return fl_chunks_open(t->steps_per_epoch, (int64_t)(t->k * t->job->train.batch_size),
                        t->job->train.seed, &t->chunks);
}

/* Full batches of the rank per epoch (a stream's last short one dropped). */
static size_t source_batches(const trainer *t) {
  if (t->stream) return fl_stream_samples(t->stream) / t->job->train.batch_size;
  return fl_loader_batches(t->loader);
}

fl_status fl_trainer_run(const fl_trainer_options *o, fl_sync *sync, fl_trainer_report *out) {
  trainer t;
  fl_trainer_report rep;
  fl_status st;
  const fl_job *job;

  memset(&t, 0, sizeof t);
  memset(&rep, 0, sizeof rep);
  if (!o || !o->job || !sync || !sync->ops) return FL_ERR(FL_EINVAL, "trainer: NULL argument");
  job = o->job;
  t.job = job;
  t.ops = sync->ops;
  t.self = sync->self;
  t.log = o->log ? o->log : stdout;
  t.rank = t.ops->rank(t.self);
  t.device = o->device;
  t.world = t.ops->world_size(t.self);
  t.k = t.k0 = fl_job_merge_steps(job);
  t.avg = job->strategy.gradient_merge_configs.avg;
  t.amp = job->strategy.amp;
  t.last_saved = -1;
  t.base_world = t.world;
  t.id = o->identity;
  t.node_ckpt = node_checkpoints();
  t.ps = fl_sync_ps_client(sync) != NULL;
  t.sync = sync;
  t.snap.step = -1;
  snprintf(t.ckdir, sizeof t.ckdir, "%s",
           o->checkpoint_dir && o->checkpoint_dir[0] ? o->checkpoint_dir : job->train.checkpoint_dir);
  set_threads(job->train.num_threads);
  if ((st = keep_global_batch(&t, o)) != FL_OK) goto done;

  if ((st = fl_job_optim_hparams(job, &t.hp, t.exclude)) != FL_OK) goto done;
  t.scaler = fl_job_loss_scaler(job);
  if ((st = load_data(&t)) != FL_OK || (st = load_validation(&t)) != FL_OK) goto done;
  if ((st = make_loader(&t)) != FL_OK) goto done;
  /* the model before the ranks agree: a model's sparse tables are
   * registered with the first barrier */
  size_t max_batch = job->train.batch_size;
  if ((t.have_test || t.vn) && job->train.eval_batch_size > max_batch)
    max_batch = job->train.eval_batch_size;
  if ((st = build_model(&t, max_batch)) != FL_OK) goto done;
  if (fl_model_sparse(t.model, NULL) &&
      (st = fl_sparse_run_create(job, t.model, sync, next_batch, &t, t.k, &t.sparse)) != FL_OK)
    goto done;
  int64_t local_steps = (int64_t)source_batches(&t) / t.k;
  /* every epoch has the same shard sizes, so the ranks agree once */
  if ((st = t.ops->agree_steps(t.self, local_steps, &t.steps_per_epoch)) != FL_OK) {
    st = lost_world_at_start(o, &rep, st); /* a peer died after the rendezvous */
    goto done;
  }
  if (t.steps_per_epoch < 1) {
    st = FL_ERR(FL_EINVAL, "%s: %zu batches of %zu per epoch give no step of %d micro-batches",
                job->source, source_batches(&t), job->train.batch_size, t.k);
    goto done;
  }
  if ((st = open_chunks(&t)) != FL_OK) goto done;
  int64_t total = t.steps_per_epoch * job->train.epochs;
  if (job->train.max_steps > 0 && job->train.max_steps < total) total = job->train.max_steps;
  if ((st = fl_job_lr_schedule(job, total, &t.sched)) != FL_OK) goto done;
  t.clip = fl_job_grad_clip(job);
  /* the servers apply sync and async pushes: clip before them (geo trains
   * locally) */
  t.clip_before_sync = t.clip.kind != FL_CLIP_NONE && t.ps &&
                       !(job->strategy.a_sync && job->strategy.a_sync_configs.k_steps > 0);

  if ((st = bind_inputs(&t)) != FL_OK || (st = check_labels(&t)) != FL_OK) goto done;
  if ((st = build_optimizer(&t)) != FL_OK) goto done;
  if (o->world_file && (st = alloc_bufsnap(&t)) != FL_OK) goto done;
  rep.activation_bytes = fl_model_activation_bytes(t.model);
  rep.steps_per_epoch = t.steps_per_epoch;
  fl_ckpt_start start = o->fresh    ? FL_CKPT_START_FRESH
                        : o->resume ? FL_CKPT_START_RESUME
                                    : FL_CKPT_START_AUTO;
  start_validation(&t);
  int held;
  if ((st = load_checkpoint(&t, o, start, &held)) != FL_OK) goto done;
  /* the ranks start together, from the same state (ps mode restarts one
   * trainer alone) */
  if (t.world > 1 && !t.ps && start != FL_CKPT_START_FRESH &&
      (st = t.ops->broadcast ? share_state(&t, held)
                             : t.ckdir[0] ? check_same_position(&t) : FL_OK) != FL_OK) {
    st = lost_world(&t, o, &rep, st); /* a peer died after the rendezvous: the next world */
    goto done;
  }
  if ((st = t.ops->init_params(t.self, t.model)) != FL_OK) {
    st = lost_world(&t, o, &rep, st); /* the state is loaded: it goes on */
    goto done;
  }
  if (o->state)
    FL_LOGI("elastic: round %" PRId64 ": rank %d of %d from step %" PRId64 "; the world change "
            "took %.2f s in pid %ld (from the stop to training again)", o->world_round, t.rank,
            t.world, t.step, clock_s(CLOCK_MONOTONIC) - o->world_t0, (long)getpid());
  if (t.ps && fl_sync_ps_join_step(sync) > 0 && (st = catch_up(&t, fl_sync_ps_step(sync))) != FL_OK)
    goto done;
  FL_LOGI("training %s: %" PRId64 " epochs of %" PRId64 " steps (%d x %zu samples, rank %d of %d), "
          "optimizer %s, activations %zu bytes",
          job->model.kind, (int64_t)job->train.epochs, t.steps_per_epoch, t.k,
          job->train.batch_size, t.rank, t.world, fl_optim_kind_name(t.hp.kind),
          rep.activation_bytes);
  rep.epochs_done = t.epoch;
  st = run_epochs(&t, o, &rep);
  if (st == FL_OK && t.sparse) st = fl_sparse_run_drain(t.sparse);
  rep.steps = t.step;
  /* a run stopped by a signal or for a new world is not complete */
  int ended = !rep.stopped && !rep.world_changed;
  if (st == FL_OK && ended) st = final_model(&t, &rep);
  /* finish while the model still exists: geo pushes its last delta from it */
  if (st == FL_OK && ended && t.sparse && job->train.export_onnx[0])
    st = fl_sparse_run_export(t.sparse, job->train.export_onnx); /* before finish: the rows */
  if (st == FL_OK && ended) st = t.ops->finish(t.self);
  if (st == FL_OK && ended && t.rank == 0 && job->train.export_onnx[0])
    st = fl_trainer_export_onnx(job, t.model, job->train.export_onnx);
done:
  trainer_free(&t);
  if (out) *out = rep;
  return st;
}
