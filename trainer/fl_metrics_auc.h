/* fl_metrics_auc.h - exact AUC and log loss of a binary classifier over the
 * predictions of every rank.
 *
 * Averaging per-rank AUCs is not the AUC of the whole test set (a rank's
 * ranking says nothing about pairs that straddle ranks), so each rank keeps
 * its (score, label) pairs in an fl_auc_acc, the caller gathers them over
 * whatever transport it has, and fl_auc_merge computes the metrics of the
 * union:
 *   AUC      = P(score of a positive > score of a negative), pairs with
 *              equal scores counting 1/2 (the Mann-Whitney U statistic over
 *              P*N): the pairs are sorted by score and each group of equal
 *              scores adds pos_g * (negatives below it) + pos_g * neg_g / 2,
 *              counted exactly in 128-bit integers.  NaN when every label
 *              is the same (no pair to rank).
 *   log loss = mean of -(y log p + (1-y) log(1-p)) with p clipped to
 *              [1e-15, 1 - 1e-15], summed in double in the order of the
 *              parts, then of the pairs within each part.
 * Scores are probabilities in [0, 1] (for AUC any monotone score would do,
 * but the log loss needs p); a label > 0.5 is a positive.  Both results are
 * the same bits for the same parts in the same order. */
#ifndef FL_METRICS_AUC_H
#define FL_METRICS_AUC_H

#include <stddef.h>

#include "fl_status.h"

/* One rank's pairs; zero-initialise, then fl_auc_add; owned by the caller
 * (fl_auc_acc_free). */
typedef struct fl_auc_acc {
  float *score;
  float *label;
  size_t n, cap;
} fl_auc_acc;

/* Append n pairs.  FL_EINVAL (logged) for a score outside [0, 1] or NaN,
 * FL_ENOMEM when the arrays cannot grow. */
fl_status fl_auc_add(fl_auc_acc *a, const float *score, const float *label, size_t n);
/* Forget the pairs, keep the arrays (the next evaluation). */
void fl_auc_reset(fl_auc_acc *a);
void fl_auc_acc_free(fl_auc_acc *a);

/* The pairs of one rank as gathered by the caller (read only). */
typedef struct fl_auc_part {
  const float *score;
  const float *label;
  size_t n;
} fl_auc_part;

typedef struct fl_auc_result {
  double auc;     /* NaN when positives or negatives is 0 */
  double logloss; /* NaN when n is 0 */
  size_t n, positives;
} fl_auc_result;

/* The metrics of the union of parts[0..nparts).  FL_EINVAL (logged) for a
 * score outside [0, 1]; FL_ENOMEM for the sort's copy. */
fl_status fl_auc_merge(const fl_auc_part *parts, size_t nparts, fl_auc_result *out);

struct fl_sync;
/* Every rank's pairs into all (appended), n pairs in rank order, through
 * the mode's metric sums (sync->ops->reduce_metrics, 64 values a call):
 * this rank's pairs `mine` stand at [lo, lo + mine->n) of the n, the
 * others add zeros there, so the sums are the pairs, bit for bit.  Every
 * rank calls it with the same n.  Errors of reduce_metrics and
 * fl_auc_add. */
fl_status fl_auc_gather(const struct fl_sync *sync, const fl_auc_acc *mine, size_t lo, size_t n,
                        fl_auc_acc *all);

#endif
