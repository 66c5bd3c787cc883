/* sync_local.c - the local mode of fl_sync (world size 1): the merged
 * gradients already are the global ones, so every hook is trivial and the
 * loop applies the optimizer itself. */
#include <config.h>

#include <stdlib.h>

#include "fl_log.h"
#include "fl_trainer.h"

typedef struct sync_local {
  int finished;
} sync_local;

static fl_status local_init_params(void *self, fl_model *m) {
  (void)self;
  (void)m;
  return FL_OK;
}

static fl_status local_agree_steps(void *self, int64_t local_steps, int64_t *global_steps) {
  (void)self;
  *global_steps = local_steps;
  return FL_OK;
}

static fl_status local_step_begin(void *self, fl_model *m, int64_t step) {
  (void)m;
  if (((sync_local *)self)->finished)
    return FL_ERR(FL_ESTATE, "local mode: step %lld begun after finish", (long long)step);
  return FL_OK;
}

static void local_grad_ready(void *self, fl_model *m, size_t index) {
  (void)self;
  (void)m;
  (void)index;
}

static fl_status local_step_end(void *self, fl_model *m, int64_t step, int *apply_locally) {
  (void)self;
  (void)m;
  (void)step;
  *apply_locally = 1;
  return FL_OK;
}

static fl_status local_reduce_metrics(void *self, double *v, size_t n) {
  (void)self;
  (void)v;
  (void)n;
  return FL_OK;
}

static int local_rank(void *self) {
  (void)self;
  return 0;
}

static int local_world_size(void *self) {
  (void)self;
  return 1;
}

static fl_status local_finish(void *self) {
  ((sync_local *)self)->finished = 1;
  return FL_OK;
}

static void local_destroy(void *self) { free(self); }

static const fl_sync_ops local_ops = {
    .name = "local",
    .init_params = local_init_params,
    .agree_steps = local_agree_steps,
    .step_begin = local_step_begin,
    .grad_ready = local_grad_ready,
    .step_end = local_step_end,
    .reduce_metrics = local_reduce_metrics,
    .rank = local_rank,
    .world_size = local_world_size,
    .finish = local_finish,
    .destroy = local_destroy,
};

fl_status fl_sync_local_create(const fl_job *job, const fl_cluster *cluster, fl_sync *out) {
  (void)job;
  out->ops = NULL;
  out->self = NULL;
  if (cluster && cluster->trainers_num != 1)
    return FL_ERR(FL_EINVAL, "local mode runs one trainer, FLOTILLA_TRAINERS_NUM is %d",
                  cluster->trainers_num);
  sync_local *s = calloc(1, sizeof *s);
  if (!s) return FL_ERR(FL_ENOMEM, "local mode: out of memory");
  out->ops = &local_ops;
  out->self = s;
  return FL_OK;
}
