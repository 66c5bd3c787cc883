/* strategy.c - what a loaded job means for the run: the effective optimizer
 * (LARS / LAMB wrapped around their inner optimizer), the learning-rate
 * schedule, the loss scaler, and the "DistributedStrategy Overview" table
 * every daemon prints at start (see fl_config.h). */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config_int.h"
#include "fl_config.h"
#include "fl_log.h"

/* ------------------------------------------------------------ resolution */

void fl_job_optimizer_to_hparams(const fl_job_optimizer *o, int num_threads,
                                 fl_optim_hparams *out) {
  memset(out, 0, sizeof *out);
  out->kind = o->kind;
  out->momentum = o->momentum;
  out->nesterov = o->nesterov;
  out->beta1 = o->beta1;
  out->beta2 = o->beta2;
  out->epsilon = o->epsilon;
  out->weight_decay = o->weight_decay;
  out->lars_coeff = 0.001f;
  out->initial_accumulator = o->initial_accumulator;
  out->l1 = o->l1;
  out->l2 = o->l2;
  out->beta = o->beta;
  out->lr_power = o->lr_power;
  out->exclude_from_weight_decay = NULL;
  out->n_exclude = 0;
  out->num_threads = num_threads;
}

/* Wrap the inner optimizer in LARS or LAMB when the strategy asks. */
static void apply_meta(const fl_job *job, fl_optim_hparams *hp, const char **exclude) {
  const fl_strategy *s = &job->strategy;
  const char(*list)[FL_JOB_NAME_MAX] = NULL;
  size_t n = 0;
  if (s->lars) {
    hp->kind = FL_OPTIM_LARS;
    hp->weight_decay = s->lars_configs.lars_weight_decay;
    hp->lars_coeff = s->lars_configs.lars_coeff;
    hp->epsilon = s->lars_configs.epsilon;
    list = s->lars_configs.exclude_from_weight_decay;
    n = s->lars_configs.n_exclude;
  } else if (s->lamb) {
    hp->kind = FL_OPTIM_LAMB;
    hp->weight_decay = s->lamb_configs.lamb_weight_decay;
    list = s->lamb_configs.exclude_from_weight_decay;
    n = s->lamb_configs.n_exclude;
  }
  for (size_t i = 0; i < n; i++) exclude[i] = list[i];
  hp->exclude_from_weight_decay = n ? exclude : NULL;
  hp->n_exclude = n;
}

fl_status fl_job_optim_hparams(const fl_job *job, fl_optim_hparams *out,
                               const char *exclude[FL_JOB_MAX_LIST]) {
  if (!job || !out || !exclude) return FL_ERR(FL_EINVAL, "fl_job_optim_hparams: NULL argument");
  fl_job_optimizer_to_hparams(&job->optimizer, job->train.num_threads, out);
  apply_meta(job, out, exclude);
  return FL_OK;
}

fl_status fl_job_pserver_hparams(const fl_job *job, fl_optim_hparams *dense,
                                 fl_optim_hparams *sparse, const char *exclude[FL_JOB_MAX_LIST]) {
  if (!job || !dense || !sparse || !exclude)
    return FL_ERR(FL_EINVAL, "fl_job_pserver_hparams: NULL argument");
  fl_job_optimizer_to_hparams(&job->pserver.optimizer, job->train.num_threads, dense);
  apply_meta(job, dense, exclude);
  fl_job_optimizer_to_hparams(&job->pserver.sparse.optimizer, 1, sparse);
  return FL_OK;
}

/* The torch-defined kinds' fields (fl_job_lr onto fl_lr_schedule). */
static void lr_torch_fields(const fl_job_lr *l, int64_t rest, fl_lr_schedule *out) {
  out->gamma = l->gamma;
  out->step_size = l->step_size;
  if (l->kind == FL_LR_MULTISTEP) {
    out->n_boundaries = l->n_milestones;
    for (size_t i = 0; i < l->n_milestones; i++) out->boundaries[i] = l->milestones[i];
  }
  if (l->kind == FL_LR_ONECYCLE) {
    if (l->max_lr > 0) out->base_lr = l->max_lr;
    out->decay_steps = l->total_steps ? l->total_steps : rest;
  }
  if (l->kind == FL_LR_LINEAR) out->decay_steps = l->total_iters ? l->total_iters : rest;
  out->pct_start = l->pct_start;
  out->anneal = l->anneal;
  out->div_factor = l->div_factor;
  out->final_div_factor = l->final_div_factor;
  out->start_factor = l->start_factor;
  out->end_factor = l->end_factor;
  out->plateau = (fl_lr_plateau){.mode_max = l->mode_max, .threshold_abs = l->threshold_abs,
                                 .factor = l->factor, .threshold = l->threshold,
                                 .min_lr = l->min_lr, .patience = l->patience,
                                 .cooldown = l->cooldown};
}

fl_status fl_job_lr_schedule_for(const fl_job *job, const fl_job_optimizer *o,
                                 int64_t total_steps, fl_lr_schedule *out) {
  if (!job || !o || !out) return FL_ERR(FL_EINVAL, "fl_job_lr_schedule: NULL argument");
  if (total_steps < 0)
    return FL_ERR(FL_EINVAL, "lr_schedule: total steps must be >= 0, got %lld",
                  (long long)total_steps);
  const fl_job_lr *l = &job->lr_schedule;
  int64_t rest = total_steps - l->warmup_steps;
  if (rest < 1) rest = 1;
  memset(out, 0, sizeof *out);
  out->kind = l->kind;
  out->base_lr = o->lr;
  out->end_lr = l->end_lr;
  out->power = l->power;
  out->warmup_steps = l->warmup_steps;
  out->warmup_start_lr = l->warmup_start_lr;
  out->decay_steps = l->decay_steps ? l->decay_steps : rest;
  out->n_boundaries = l->n_boundaries;
  for (size_t i = 0; i < l->n_boundaries; i++) out->boundaries[i] = l->boundaries[i];
  for (size_t i = 0; i < l->n_values; i++) out->values[i] = l->values[i];
  lr_torch_fields(l, rest, out);
  if (fl_lr_schedule_check(out) != FL_OK)
    return FL_ERR(FL_EINVAL, "%s: lr_schedule kind %s is out of range over %lld steps after "
                  "%lld warmup steps; check its keys (%s)%s", job->source,
                  fl_lr_kind_name(l->kind), (long long)out->decay_steps,
                  (long long)l->warmup_steps, fl_lr_kind_keys(l->kind),
                  l->kind == FL_LR_ONECYCLE ? ": onecycle needs 1 < pct_start * total_steps < "
                  "total_steps" : "");
  return FL_OK;
}

fl_clip fl_job_grad_clip(const fl_job *job) {
  return (fl_clip){.kind = job->optimizer.grad_clip.kind,
                   .max_norm = job->optimizer.grad_clip.max_norm,
                   .clip_value = job->optimizer.grad_clip.clip_value,
                   .norm_type = job->optimizer.grad_clip.norm_type};
}

fl_status fl_job_lr_schedule(const fl_job *job, int64_t total_steps, fl_lr_schedule *out) {
  if (!job) return FL_ERR(FL_EINVAL, "fl_job_lr_schedule: NULL job");
  return fl_job_lr_schedule_for(job, &job->optimizer, total_steps, out);
}

fl_loss_scaler fl_job_loss_scaler(const fl_job *job) {
  fl_loss_scaler s;
  memset(&s, 0, sizeof s);
  s.scale = job->strategy.amp_configs.init_loss_scaling;
  s.incr_every_n_steps = job->strategy.amp_configs.incr_every_n_steps;
  s.decr_every_n_nan_or_inf = job->strategy.amp_configs.decr_every_n_nan_or_inf;
  s.incr_ratio = job->strategy.amp_configs.incr_ratio;
  s.decr_ratio = job->strategy.amp_configs.decr_ratio;
  s.dynamic = job->strategy.amp_configs.use_dynamic_loss_scaling;
  return s;
}

int fl_job_merge_steps(const fl_job *job) {
  return job->strategy.gradient_merge ? job->strategy.gradient_merge_configs.k_steps : 1;
}

/* ------------------------------------------------------------ overview */

#define BOX_INNER 78

static void rule(FILE *out, char c) {
  fputc('+', out);
  for (int i = 0; i < BOX_INNER; i++) fputc(c, out);
  fputs("+\n", out);
}

static void centered(FILE *out, const char *text) {
  int len = (int)strlen(text);
  if (len > BOX_INNER) len = BOX_INNER;
  int left = (BOX_INNER - len) / 2;
  fprintf(out, "|%*s%.*s%*s|\n", left, "", len, text, BOX_INNER - len - left, "");
}

/* "key    value" with the key right-aligned left of the middle. */
static void kv(FILE *out, const char *key, const char *value) {
  char v[40];
  snprintf(v, sizeof v, "%s", value);
  if (strlen(value) >= sizeof v) memcpy(v + sizeof v - 4, "...", 4);
  fprintf(out, "|%36.36s    %-38s|\n", key, v);
}

static void kv_fmt(FILE *out, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void kv_fmt(FILE *out, const char *key, const char *fmt, ...) {
  char v[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  kv(out, key, v);
}

static const char *tf(int b) { return b ? "True" : "False"; }

static void kv_list(FILE *out, const char *key, const char (*l)[FL_JOB_NAME_MAX], size_t n) {
  if (n == 0) {
    kv(out, key, "[]");
    return;
  }
  for (size_t i = 0; i < n; i++) kv(out, i ? "" : key, l[i]);
}

static void block(FILE *out, const char *title) {
  centered(out, title);
  rule(out, '-');
}

void fl_strategy_print_overview(const fl_job *job, FILE *out) {
  const fl_strategy *s = &job->strategy;
  int any = 0;
  rule(out, '=');
  centered(out, "");
  centered(out, "DistributedStrategy Overview");
  centered(out, "");
  rule(out, '=');
  if (s->a_sync) {
    block(out, "a_sync=True <-> a_sync_configs");
    kv_fmt(out, "k_steps", "%d", s->a_sync_configs.k_steps);
    rule(out, '=');
    any = 1;
  }
  if (s->gradient_merge) {
    block(out, "gradient_merge=True <-> gradient_merge_configs");
    kv_fmt(out, "k_steps", "%d", s->gradient_merge_configs.k_steps);
    kv(out, "avg", tf(s->gradient_merge_configs.avg));
    rule(out, '=');
    any = 1;
  }
  if (s->lars) {
    block(out, "lars=True <-> lars_configs");
    kv_fmt(out, "lars_coeff", "%g", (double)s->lars_configs.lars_coeff);
    kv_fmt(out, "lars_weight_decay", "%g", (double)s->lars_configs.lars_weight_decay);
    kv_fmt(out, "epsilon", "%g", (double)s->lars_configs.epsilon);
    kv_list(out, "exclude_from_weight_decay", s->lars_configs.exclude_from_weight_decay,
            s->lars_configs.n_exclude);
    rule(out, '=');
    any = 1;
  }
  if (s->lamb) {
    block(out, "lamb=True <-> lamb_configs");
    kv_fmt(out, "lamb_weight_decay", "%g", (double)s->lamb_configs.lamb_weight_decay);
    kv_list(out, "exclude_from_weight_decay", s->lamb_configs.exclude_from_weight_decay,
            s->lamb_configs.n_exclude);
    rule(out, '=');
    any = 1;
  }
  if (s->amp) {
    const __typeof__(s->amp_configs) *a = &s->amp_configs;
    block(out, "amp=True <-> amp_configs");
    kv_fmt(out, "init_loss_scaling", "%g", (double)a->init_loss_scaling);
    kv_fmt(out, "incr_every_n_steps", "%d", a->incr_every_n_steps);
    kv_fmt(out, "decr_every_n_nan_or_inf", "%d", a->decr_every_n_nan_or_inf);
    kv_fmt(out, "incr_ratio", "%g", (double)a->incr_ratio);
    kv_fmt(out, "decr_ratio", "%g", (double)a->decr_ratio);
    kv(out, "use_dynamic_loss_scaling", tf(a->use_dynamic_loss_scaling));
    kv_list(out, "custom_white_list", a->custom_white_list, a->n_white);
    kv_list(out, "custom_black_list", a->custom_black_list, a->n_black);
    kv(out, "dtype", fl_cfg_amp_dtype_name(a->dtype));
    rule(out, '=');
    any = 1;
  }
  if (s->recompute) {
    block(out, "recompute=True <-> recompute_configs");
    if (s->recompute_configs.n_checkpoints)
      kv_list(out, "checkpoints", s->recompute_configs.checkpoints,
              s->recompute_configs.n_checkpoints);
    else
      kv(out, "checkpoints", "(every layer)");
    rule(out, '=');
    any = 1;
  }
  if (job->cluster.mode == FL_MODE_COLLECTIVE) {
    block(out, "collective communication");
    kv(out, "fuse_all_reduce_ops", tf(s->fuse_all_reduce_ops));
    if (s->fuse_all_reduce_ops) {
      kv_fmt(out, "fuse_grad_size_in_MB", "%d", s->fuse_grad_size_in_MB);
      kv_fmt(out, "fuse_grad_size_in_TFLOPS", "%d", s->fuse_grad_size_in_TFLOPS);
    }
    kv_fmt(out, "nccl_comm_num", "%d", s->nccl_comm_num);
    kv(out, "sync_nccl_allreduce", tf(s->sync_nccl_allreduce));
    if (s->use_hierarchical_allreduce) {
      kv(out, "use_hierarchical_allreduce", "True");
      if (s->hierarchical_allreduce_inter_nranks)
        kv_fmt(out, "hierarchical_allreduce_inter_nranks", "%d",
               s->hierarchical_allreduce_inter_nranks);
      else
        kv(out, "hierarchical_allreduce_inter_nranks", "(ranks per node)");
    }
    if (s->sync_batch_norm) kv(out, "sync_batch_norm", "True");
    if (s->grad_compression != FL_COMPRESS_NONE)
      kv(out, "grad_compression", fl_cfg_compress_name(s->grad_compression));
    rule(out, '=');
    any = 1;
  } else if (job->cluster.mode == FL_MODE_PS && !s->a_sync) {
    block(out, "a_sync=False (synchronous parameter servers)");
    kv_fmt(out, "pserver optimizer", "%s", fl_cfg_optim_name(job->pserver.optimizer.kind));
    rule(out, '=');
    any = 1;
  }
  if (!any) {
    centered(out, "(no strategy enabled)");
    rule(out, '=');
  }
  fflush(out);
}
