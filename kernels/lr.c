/* lr.c - learning-rate schedules: constant, polynomial decay, cosine,
 * piecewise constant, and torch.optim.lr_scheduler's StepLR, MultiStepLR,
 * ExponentialLR, OneCycleLR (two phases), LinearLR, fairseq's inverse_sqrt
 * and ReduceLROnPlateau, each with an optional linear warmup in front.
 *
 * A schedule is a plain struct of scalars (fl_optim.h) evaluated in double
 * at a step number, so the trainer and the pserver, which both need the rate
 * of a step, compute the same value without sharing any state.  The one
 * exception is reduce-on-plateau, whose rate follows the metrics the
 * trainer feeds it (fl_lr_plateau_observe); its state lives in the struct.
 * Each kind is one row of `rows`: its name, the job-file keys it reads, its
 * range check and its value at t updates into the schedule. */
#include <config.h>

#include <math.h>
#include <string.h>

#include "fl_names.h"
#include "fl_optim.h"

typedef struct lr_row {
  const char *name;
  const char *keys;                               /* job-file keys it reads */
  int (*ok)(const fl_lr_schedule *s);             /* its own fields in range */
  double (*at)(const fl_lr_schedule *s, int64_t t); /* t >= 0 updates after warmup */
} lr_row;

static int nonneg(float x) { return isfinite(x) && x >= 0.0f; }
static int unit_gamma(float g) { return isfinite(g) && g > 0.0f && g <= 1.0f; }

/* ------------------------------------------------------------ the kinds */

static int ok_none(const fl_lr_schedule *s) { return s != NULL; }
static double at_constant(const fl_lr_schedule *s, int64_t t) {
  (void)t;
  return s->base_lr;
}

static int ok_polynomial(const fl_lr_schedule *s) {
  return isfinite(s->power) && s->power > 0.0f && nonneg(s->end_lr) && s->decay_steps >= 1;
}
static double at_polynomial(const fl_lr_schedule *s, int64_t t) {
  double f = t >= s->decay_steps ? 0.0 : 1.0 - (double)t / (double)s->decay_steps;
  return ((double)s->base_lr - s->end_lr) * pow(f, s->power) + s->end_lr;
}

static int ok_cosine(const fl_lr_schedule *s) { return nonneg(s->end_lr) && s->decay_steps >= 1; }
static double at_cosine(const fl_lr_schedule *s, int64_t t) {
  if (t >= s->decay_steps) return s->end_lr;
  double x = M_PI * (double)t / (double)s->decay_steps;
  return s->end_lr + ((double)s->base_lr - s->end_lr) * (1.0 + cos(x)) / 2.0;
}

/* boundaries[0..n) strictly increasing, >= min. */
static int sorted(const fl_lr_schedule *s, int64_t min) {
  if (s->n_boundaries > FL_LR_MAX_PIECES) return 0;
  for (size_t i = 0; i < s->n_boundaries; i++)
    if (s->boundaries[i] < min || (i > 0 && s->boundaries[i] <= s->boundaries[i - 1])) return 0;
  return 1;
}
/* Number of boundaries <= t. */
static size_t passed(const fl_lr_schedule *s, int64_t t) {
  size_t i = 0;
  while (i < s->n_boundaries && t >= s->boundaries[i]) i++;
  return i;
}

static int ok_piecewise(const fl_lr_schedule *s) {
  if (!sorted(s, 0)) return 0;
  for (size_t i = 0; i <= s->n_boundaries; i++)
    if (!nonneg(s->values[i])) return 0;
  return 1;
}
static double at_piecewise(const fl_lr_schedule *s, int64_t t) { return s->values[passed(s, t)]; }

static int ok_step(const fl_lr_schedule *s) { return unit_gamma(s->gamma) && s->step_size >= 1; }
static double at_step(const fl_lr_schedule *s, int64_t t) {
  return s->base_lr * pow(s->gamma, (double)(t / s->step_size));
}

static int ok_multistep(const fl_lr_schedule *s) {
  return unit_gamma(s->gamma) && s->n_boundaries >= 1 && sorted(s, 1);
}
static double at_multistep(const fl_lr_schedule *s, int64_t t) {
  return s->base_lr * pow(s->gamma, (double)passed(s, t));
}

static int ok_exponential(const fl_lr_schedule *s) { return unit_gamma(s->gamma); }
static double at_exponential(const fl_lr_schedule *s, int64_t t) {
  return s->base_lr * pow(s->gamma, (double)t);
}

/* OneCycleLR's phase ends: the rise ends at step pct*total - 1, the fall
 * at total - 1 (torch's float arithmetic). */
static double onecycle_rise_end(const fl_lr_schedule *s) {
  return (double)s->pct_start * (double)s->decay_steps - 1.0;
}
static int ok_onecycle(const fl_lr_schedule *s) {
  double e1 = onecycle_rise_end(s);
  return s->decay_steps >= 2 && isfinite(s->pct_start) && e1 > 0.0 &&
         e1 < (double)s->decay_steps - 1.0 && (unsigned)s->anneal <= FL_LR_ANNEAL_LINEAR &&
         isfinite(s->div_factor) && s->div_factor > 0.0f && isfinite(s->final_div_factor) &&
         s->final_div_factor > 0.0f;
}
static double anneal(fl_lr_anneal a, double from, double to, double pct) {
  if (a == FL_LR_ANNEAL_LINEAR) return (to - from) * pct + from;
  return to + (from - to) / 2.0 * (cos(M_PI * pct) + 1.0);
}
/* Held at the final rate past total_steps (torch raises there). */
static double at_onecycle(const fl_lr_schedule *s, int64_t t) {
  double e1 = onecycle_rise_end(s), e2 = (double)s->decay_steps - 1.0, x = (double)t;
  double initial = (double)s->base_lr / s->div_factor, low = initial / s->final_div_factor;
  if (x <= e1) return anneal(s->anneal, initial, s->base_lr, x / e1);
  if (x > e2) x = e2;
  return anneal(s->anneal, s->base_lr, low, (x - e1) / (e2 - e1));
}

static int ok_linear(const fl_lr_schedule *s) {
  return isfinite(s->start_factor) && s->start_factor > 0.0f && s->start_factor <= 1.0f &&
         isfinite(s->end_factor) && s->end_factor >= 0.0f && s->end_factor <= 1.0f &&
         s->decay_steps >= 1;
}
static double at_linear(const fl_lr_schedule *s, int64_t t) {
  double x = t < s->decay_steps ? (double)t : (double)s->decay_steps;
  double span = (double)s->end_factor - s->start_factor;
  double f = s->start_factor + span * x / (double)s->decay_steps;
  return s->base_lr * f;
}

static int ok_inverse_sqrt(const fl_lr_schedule *s) { return s->warmup_steps >= 1; }
static double at_inverse_sqrt(const fl_lr_schedule *s, int64_t t) {
  double w = (double)s->warmup_steps;
  return s->base_lr * sqrt(w) / sqrt(w + (double)t);
}

static int ok_plateau(const fl_lr_schedule *s) {
  const fl_lr_plateau *p = &s->plateau;
  return isfinite(p->factor) && p->factor > 0.0f && p->factor < 1.0f && nonneg(p->threshold) &&
         nonneg(p->min_lr) && p->patience >= 0 && p->cooldown >= 0 && p->observed >= 0 &&
         (unsigned)p->mode_max <= 1 && (unsigned)p->threshold_abs <= 1;
}
static double at_plateau(const fl_lr_schedule *s, int64_t t) {
  (void)t;
  return s->plateau.observed > 0 ? s->plateau.lr : s->base_lr;
}

static const lr_row rows[] = {
    [FL_LR_CONSTANT] = {"constant", "", ok_none, at_constant},
    [FL_LR_POLYNOMIAL] = {"polynomial", "end_lr power decay_steps", ok_polynomial, at_polynomial},
    [FL_LR_COSINE] = {"cosine", "end_lr decay_steps", ok_cosine, at_cosine},
    [FL_LR_PIECEWISE] = {"piecewise", "boundaries values", ok_piecewise, at_piecewise},
    [FL_LR_STEP] = {"step", "step_size gamma", ok_step, at_step},
    [FL_LR_MULTISTEP] = {"multistep", "milestones gamma", ok_multistep, at_multistep},
    [FL_LR_EXPONENTIAL] = {"exponential", "gamma", ok_exponential, at_exponential},
    [FL_LR_ONECYCLE] = {"onecycle",
                        "max_lr total_steps pct_start anneal div_factor final_div_factor",
                        ok_onecycle, at_onecycle},
    [FL_LR_LINEAR] = {"linear", "start_factor end_factor total_iters", ok_linear, at_linear},
    [FL_LR_INVERSE_SQRT] = {"inverse_sqrt", "", ok_inverse_sqrt, at_inverse_sqrt},
    [FL_LR_PLATEAU] = {"plateau",
                       "mode factor patience threshold threshold_mode cooldown min_lr metric",
                       ok_plateau, at_plateau},
};
_Static_assert(sizeof rows / sizeof rows[0] == FL_LR_COUNT, "one row per fl_lr_kind");

const char *const fl_lr_kind_names[] = {
    "constant", "polynomial", "cosine",       "piecewise", "step",    "multistep",
    "exponential", "onecycle", "linear", "inverse_sqrt", "plateau", NULL};
_Static_assert(sizeof fl_lr_kind_names / sizeof fl_lr_kind_names[0] == FL_LR_COUNT + 1,
               "one name per fl_lr_kind, then NULL");

/* ------------------------------------------------------------ the API */

const char *fl_lr_kind_name(fl_lr_kind kind) {
  if ((unsigned)kind >= FL_LR_COUNT) return "unknown";
  return rows[kind].name;
}

fl_status fl_lr_kind_parse(const char *name, fl_lr_kind *out) {
  if (!out) return FL_EINVAL;
  const int i = fl_names_find(fl_lr_kind_names, name);
  if (i < 0) return FL_EINVAL;
  *out = (fl_lr_kind)i;
  return FL_OK;
}

const char *fl_lr_kind_keys(fl_lr_kind kind) {
  if ((unsigned)kind >= FL_LR_COUNT) return "";
  return rows[kind].keys;
}

int fl_lr_kind_takes(fl_lr_kind kind, const char *key) {
  const char *k = fl_lr_kind_keys(kind);
  size_t n = key ? strlen(key) : 0;
  if (n == 0) return 0;
  for (const char *p = strstr(k, key); p; p = strstr(p + 1, key))
    if ((p == k || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

fl_status fl_lr_schedule_check(const fl_lr_schedule *s) {
  if (!s || (unsigned)s->kind >= FL_LR_COUNT) return FL_EINVAL;
  if (!nonneg(s->base_lr) || s->warmup_steps < 0 || !nonneg(s->warmup_start_lr))
    return FL_EINVAL;
  return rows[s->kind].ok(s) ? FL_OK : FL_EINVAL;
}

float fl_lr_at(const fl_lr_schedule *s, int64_t step) {
  if (fl_lr_schedule_check(s) != FL_OK) return NAN;
  if (step < 0) step = 0;
  if (step < s->warmup_steps) {
    double target = rows[s->kind].at(s, 0), start = s->warmup_start_lr;
    return (float)(start + (target - start) * (double)step / (double)s->warmup_steps);
  }
  return (float)rows[s->kind].at(s, step - s->warmup_steps);
}

/* torch's is_better, with best the best so far. */
static int improves(const fl_lr_plateau *p, double a, double best) {
  double th = p->threshold;
  if (!p->mode_max)
    return p->threshold_abs ? a < best - th : a < best * (1.0 - th);
  return p->threshold_abs ? a > best + th : a > best * (th + 1.0);
}

fl_status fl_lr_plateau_observe(fl_lr_schedule *s, double metric, int *reduced) {
  if (reduced) *reduced = 0;
  if (!s || s->kind != FL_LR_PLATEAU || fl_lr_schedule_check(s) != FL_OK) return FL_EINVAL;
  fl_lr_plateau *p = &s->plateau;
  if (p->observed++ == 0) {
    p->lr = s->base_lr;
    p->best = p->mode_max ? -INFINITY : INFINITY;
    p->bad = p->cooldown_left = 0;
  }
  if (improves(p, metric, p->best)) {
    p->best = metric;
    p->bad = 0;
  } else {
    p->bad++;
  }
  if (p->cooldown_left > 0) {
    p->cooldown_left--;
    p->bad = 0;
  }
  if (p->bad > p->patience) {
    double next = p->lr * p->factor;
    if (next < p->min_lr) next = p->min_lr;
    if (p->lr - next > 1e-8) {
      p->lr = next;
      if (reduced) *reduced = 1;
    }
    p->cooldown_left = p->cooldown;
    p->bad = 0;
  }
  return FL_OK;
}
