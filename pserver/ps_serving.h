/* ps_serving.h - pserver.serving_export (pserver/serving_export.c): the
 * sparse tables of each checkpoint written again for a serving system, as
 * a base and deltas of ids and rows in the trainer's export layout
 * (.npy), so that serving picks up changes without a full dump.  Private
 * to pserver/; the format is documented in README.md (export for
 * serving). */
#ifndef FL_PS_SERVING_H
#define FL_PS_SERVING_H

#include <stdint.h>

#include "fl_status.h"

/* Write the tables of the checkpoint file ckpt (just committed, holding
 * step) into dir (created when missing): a base N when seq is 0, else
 * delta seq of base N; then dir/manifest.json names base N and deltas
 * 1..seq.  With the disk tier, tier_copy (else NULL) is the store's copy
 * beside ckpt, read for the rows on disk.  A base removes the files of
 * other bases.  Every file is written to a temporary, synced and renamed.
 * FL_EIO / FL_ENOMEM / FL_ECORRUPT logged, naming the file; the manifest
 * is then left as it was. */
fl_status fl_ps_serving_export(const char *dir, const char *ckpt, const char *tier_copy,
                               int64_t base, int64_t seq, int64_t step);

#endif
