/* model_export.c - a job's trained model out as ONNX (fl_trainer.h): at the end
 * of training (train.export_onnx) and from the newest checkpoint
 * (flotilla-trainer --export-onnx).  The checkpoint path builds the job's
 * model on the CPU exactly as training does (fl_trainer_model_spec), reads
 * every parameter and buffer back from the checkpoint, and hands the graph
 * to the exporter, so the file holds what the trainer would evaluate. */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_ckpt.h"
#include "fl_log.h"
#include "fl_onnx.h"
#include "fl_trainer.h"
#include "fl_model_kind.h"

fl_status fl_trainer_export_onnx(const fl_job *job, const fl_model *m, const char *out_path) {
  const fl_graph *g = fl_model_graph(m);
  if (!g)
    return FL_ERR(FL_ENOTSUP, "%s: model.kind %s cannot be exported as ONNX (logreg, mlp, cnn "
                  "and onnx can)", job->source, job->model.kind);
  const int imported = fl_model_kind_has(job->model.kind, FL_KIND_FILE);
  return fl_onnx_export(imported ? job->model.path : NULL, g, out_path);
}

/* The checkpoint's meta/format and meta/model must say it is this trainer's
 * checkpoint of this kind of model. */
static fl_status check_meta(const fl_ckpt *c, const char *path, const fl_job *job) {
  fl_ckpt_record rec;
  if (fl_ckpt_find(c, "meta/format", &rec) != FL_OK ||
      rec.nbytes != strlen(FL_TRAINER_CKPT_FORMAT) ||
      memcmp(rec.data, FL_TRAINER_CKPT_FORMAT, rec.nbytes))
    return FL_ERR(FL_EINVAL, "%s: not a flotilla-trainer checkpoint", path);
  const char *kind = job->model.kind;
  if (fl_ckpt_find(c, "meta/model", &rec) != FL_OK || rec.nbytes != strlen(kind) ||
      memcmp(rec.data, kind, rec.nbytes))
    return FL_ERR(FL_EINVAL, "%s: not a checkpoint of model.kind %s (meta/model is '%.*s')",
                  path, kind, (int)(rec.nbytes < 32 ? rec.nbytes : 32),
                  rec.data ? (const char *)rec.data : "");
  return FL_OK;
}

fl_status fl_trainer_export_checkpoint(const fl_job *job, const char *ckdir, const char *out_path) {
  const char *dir = ckdir && ckdir[0] ? ckdir : job->train.checkpoint_dir;
  if (!dir[0])
    return FL_ERR(FL_EINVAL, "%s: --export-onnx reads the newest checkpoint, but the job has no "
                  "train.checkpoint_dir (nor FLOTILLA_CHECKPOINT_DIR / --checkpoint_dir)",
                  job->source);
  if (!fl_model_kind_has(job->model.kind, FL_KIND_EXPORT))
    return FL_ERR(FL_ENOTSUP, "%s: model.kind %s cannot be exported as ONNX (logreg, mlp, cnn "
                  "and onnx can)", job->source, job->model.kind);
  if (job->pserver.n_sparse_tables > 0)
    return FL_ERR(FL_ENOTSUP, "%s: --export-onnx: the job's pserver.sparse_tables live on the "
                  "pservers, not in its checkpoints: set train.export_onnx, which writes them "
                  "at the end of training", job->source);
  fl_ckpt *c = NULL;
  int64_t step = 0;
  fl_status st = fl_ckpt_dir_load_latest(dir, &c, &step);
  if (st == FL_ENOTFOUND)
    return FL_ERR(FL_ENOTFOUND, "%s: no checkpoint in %s to export: train the job first "
                  "(checkpoints are written every train.checkpoint_interval steps and at each "
                  "epoch end)", job->source, dir);
  if (st != FL_OK) return st;
  char path[FL_JOB_PATH_MAX + 64];
  fl_ckpt_dir_path(dir, step, path, sizeof path);
  fl_job *cpu = malloc(sizeof *cpu);
  fl_model *m = NULL;
  if (!cpu) {
    st = FL_ERR(FL_ENOMEM, "--export-onnx: out of memory");
    goto done;
  }
  if ((st = check_meta(c, path, job)) != FL_OK) goto done;
  *cpu = *job; /* the export computes nothing: the model is built on the CPU */
  cpu->train.device = FL_DEVICE_CPU;
  const char *ck[FL_TRAINER_SPEC_NAMES];
  fl_model_spec spec;
  fl_trainer_model_spec(cpu, 0, ck, &spec);
  if ((st = fl_model_create(&spec, 1, cpu->train.seed, &m)) != FL_OK) goto done;
  const size_t np = fl_model_num_params(m);
  for (size_t i = 0; i < np; i++) {
    fl_param *p = fl_model_param(m, i);
    char name[FL_MODEL_NAME_MAX + 16];
    snprintf(name, sizeof name, "param/%s", p->name);
    if ((st = fl_ckpt_read(c, name, FL_CKPT_F32, p->ndim, p->shape, p->value)) != FL_OK)
      goto done; /* logged, naming the record */
  }
  FL_LOGI("--export-onnx: %zu parameters and buffers of step %" PRId64 " from %s", np, step, path);
  st = fl_trainer_export_onnx(cpu, m, out_path);
done:
  fl_model_destroy(m);
  fl_ckpt_free(c);
  free(cpu);
  return st;
}
