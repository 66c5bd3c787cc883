/* lr.c - learning-rate schedules: constant, polynomial decay, cosine and
 * piecewise constant, each with an optional linear warmup in front.
 *
 * A schedule is a plain struct of scalars (fl_optim.h) evaluated in double
 * at a step number, so the trainer and the pserver, which both need the rate
 * of a step, compute the same value without sharing any state. */
#include <config.h>

#include <math.h>
#include <string.h>

#include "fl_optim.h"

static const char *const lr_names[] = {"constant", "polynomial", "cosine", "piecewise"};
#define N_LR_KINDS (sizeof lr_names / sizeof lr_names[0])

const char *fl_lr_kind_name(fl_lr_kind kind) {
  if ((unsigned)kind >= N_LR_KINDS)
    return "unknown";
  return lr_names[kind];
}

fl_status fl_lr_kind_parse(const char *name, fl_lr_kind *out) {
  if (!name || !out)
    return FL_EINVAL;
  for (size_t i = 0; i < N_LR_KINDS; i++)
    if (strcmp(name, lr_names[i]) == 0) {
      *out = (fl_lr_kind)i;
      return FL_OK;
    }
  return FL_EINVAL;
}

static int nonneg(float x) { return isfinite(x) && x >= 0.0f; }

fl_status fl_lr_schedule_check(const fl_lr_schedule *s) {
  if (!s || (unsigned)s->kind >= N_LR_KINDS)
    return FL_EINVAL;
  if (!nonneg(s->base_lr) || s->warmup_steps < 0 || !nonneg(s->warmup_start_lr))
    return FL_EINVAL;
  switch (s->kind) {
  case FL_LR_CONSTANT: break;
  case FL_LR_POLYNOMIAL:
    if (!(isfinite(s->power) && s->power > 0.0f) || !nonneg(s->end_lr) || s->decay_steps < 1)
      return FL_EINVAL;
    break;
  case FL_LR_COSINE:
    if (!nonneg(s->end_lr) || s->decay_steps < 1)
      return FL_EINVAL;
    break;
  case FL_LR_PIECEWISE:
    if (s->n_boundaries > FL_LR_MAX_PIECES)
      return FL_EINVAL;
    for (size_t i = 0; i <= s->n_boundaries; i++)
      if (!nonneg(s->values[i]))
        return FL_EINVAL;
    for (size_t i = 0; i < s->n_boundaries; i++)
      if (s->boundaries[i] < 0 || (i > 0 && s->boundaries[i] <= s->boundaries[i - 1]))
        return FL_EINVAL;
    break;
  }
  return FL_OK;
}

/* The schedule without warmup at t updates into the decay. */
static double decayed(const fl_lr_schedule *s, int64_t t) {
  double base = s->base_lr, end = s->end_lr;
  switch (s->kind) {
  case FL_LR_CONSTANT: return base;
  case FL_LR_POLYNOMIAL: {
    double f = t >= s->decay_steps ? 0.0 : 1.0 - (double)t / (double)s->decay_steps;
    return (base - end) * pow(f, s->power) + end;
  }
  case FL_LR_COSINE: {
    if (t >= s->decay_steps)
      return end;
    double x = M_PI * (double)t / (double)s->decay_steps;
    return end + (base - end) * (1.0 + cos(x)) / 2.0;
  }
  case FL_LR_PIECEWISE: {
    size_t i = 0;
    while (i < s->n_boundaries && t >= s->boundaries[i])
      i++;
    return s->values[i];
  }
  }
  return NAN;
}

float fl_lr_at(const fl_lr_schedule *s, int64_t step) {
  if (fl_lr_schedule_check(s) != FL_OK)
    return NAN;
  if (step < 0)
    step = 0;
  if (step < s->warmup_steps) {
    double target = decayed(s, 0), start = s->warmup_start_lr;
    return (float)(start + (target - start) * (double)step / (double)s->warmup_steps);
  }
  return (float)decayed(s, step - s->warmup_steps);
}
