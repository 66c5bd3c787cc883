/* metrics_auc.c - exact AUC (Mann-Whitney, ties half) and mean log loss
 * over the gathered (score, label) pairs of every rank (fl_metrics_auc.h),
 * and the gather itself through a mode's metric sums, which every
 * evaluation of a binary model shares (dense and sparse). */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_metrics_auc.h"
#include "fl_sync.h"

#define LOGLOSS_EPS 1e-15

static int bad_score(float s) { return !(s >= 0.0f && s <= 1.0f); }

fl_status fl_auc_add(fl_auc_acc *a, const float *score, const float *label, size_t n) {
  if (n == 0) return FL_OK;
  for (size_t i = 0; i < n; i++)
    if (bad_score(score[i]))
      return FL_ERR(FL_EINVAL, "auc: score %g of pair %zu is not a probability in [0, 1]",
                    (double)score[i], a->n + i);
  if (a->n + n > a->cap) {
    size_t cap = a->cap ? a->cap : 1024;
    while (cap < a->n + n) cap *= 2;
    float *s = realloc(a->score, cap * sizeof *s);
    if (s) a->score = s;
    float *l = realloc(a->label, cap * sizeof *l);
    if (l) a->label = l;
    if (!s || !l) return FL_ERR(FL_ENOMEM, "auc: cannot keep %zu pairs", a->n + n);
    a->cap = cap;
  }
  memcpy(a->score + a->n, score, n * sizeof *score);
  memcpy(a->label + a->n, label, n * sizeof *label);
  a->n += n;
  return FL_OK;
}

void fl_auc_reset(fl_auc_acc *a) { a->n = 0; }

void fl_auc_acc_free(fl_auc_acc *a) {
  if (!a) return;
  free(a->score);
  free(a->label);
  memset(a, 0, sizeof *a);
}

typedef struct pair {
  float score;
  int pos;
} pair;

static int by_score(const void *a, const void *b) {
  const pair *x = a, *y = b;
  if (x->score != y->score) return x->score < y->score ? -1 : 1;
  return x->pos - y->pos;
}

/* AUC of n pairs sorted by score: each group of equal scores adds
 * 2 * pos_g * neg_below + pos_g * neg_g to twice the U statistic. */
static double sorted_auc(const pair *p, size_t n) {
  unsigned __int128 u2 = 0;
  uint64_t neg_below = 0, pos = 0;
  for (size_t i = 0; i < n;) {
    uint64_t pg = 0, ng = 0;
    size_t j = i;
    for (; j < n && p[j].score == p[i].score; j++) p[j].pos ? pg++ : ng++;
    u2 += (unsigned __int128)pg * (2 * neg_below + ng);
    neg_below += ng;
    pos += pg;
    i = j;
  }
  if (pos == 0 || neg_below == 0) return NAN;
  return (double)((long double)u2 / 2.0L / ((long double)pos * (long double)neg_below));
}

static double pair_loss(float s, int pos) {
  double p = s < LOGLOSS_EPS ? LOGLOSS_EPS : s > 1.0 - LOGLOSS_EPS ? 1.0 - LOGLOSS_EPS : s;
  return pos ? -log(p) : -log(1.0 - p);
}

fl_status fl_auc_merge(const fl_auc_part *parts, size_t nparts, fl_auc_result *out) {
  size_t n = 0, k = 0;
  double loss = 0.0;
  memset(out, 0, sizeof *out);
  for (size_t r = 0; r < nparts; r++) n += parts[r].n;
  pair *p = malloc((n ? n : 1) * sizeof *p);
  if (!p) return FL_ERR(FL_ENOMEM, "auc: cannot sort %zu pairs", n);
  for (size_t r = 0; r < nparts; r++)
    for (size_t i = 0; i < parts[r].n; i++, k++) {
      const float s = parts[r].score[i];
      if (bad_score(s)) {
        free(p);
        return FL_ERR(FL_EINVAL, "auc: score %g of pair %zu of part %zu is not a probability "
                      "in [0, 1]", (double)s, i, r);
      }
      p[k] = (pair){.score = s, .pos = parts[r].label[i] > 0.5f};
      loss += pair_loss(s, p[k].pos);
      out->positives += (size_t)p[k].pos;
    }
  qsort(p, n, sizeof *p, by_score);
  out->n = n;
  out->auc = sorted_auc(p, n);
  out->logloss = n ? loss / (double)n : NAN;
  free(p);
  return FL_OK;
}

/* Pairs per metric sum (the ps mode sums at most 64 values at once). */
#define GATHER_CHUNK 64

/* A pair as one double: the probability's bits and the label, exact. */
static double pack(float p, float y) {
  uint32_t bits;
  memcpy(&bits, &p, sizeof bits);
  return (double)(((uint64_t)bits << 1) | (y > 0.5f));
}

static void unpack(double v, float *p, float *y) {
  const uint64_t u = (uint64_t)v;
  const uint32_t bits = (uint32_t)(u >> 1);
  memcpy(p, &bits, sizeof *p);
  *y = (float)(u & 1);
}

fl_status fl_auc_gather(const fl_sync *sync, const fl_auc_acc *mine, size_t lo, size_t n,
                        fl_auc_acc *all) {
  double v[GATHER_CHUNK];
  float p[GATHER_CHUNK], y[GATHER_CHUNK];
  for (size_t c = 0; c < n; c += GATHER_CHUNK) {
    const size_t m = n - c < GATHER_CHUNK ? n - c : GATHER_CHUNK;
    for (size_t j = 0; j < m; j++) {
      const size_t i = c + j;
      v[j] = i >= lo && i < lo + mine->n ? pack(mine->score[i - lo], mine->label[i - lo]) : 0;
    }
    FL_TRY(sync->ops->reduce_metrics(sync->self, v, m));
    for (size_t j = 0; j < m; j++) unpack(v[j], &p[j], &y[j]);
    FL_TRY(fl_auc_add(all, p, y, m));
  }
  return FL_OK;
}
