/* fuzz_libsvm.c - the sparse text readers (libsvm / libffm and slot files:
 * fl_sparse_load_mem, fl_sparse_load) on hostile text.
 *
 * Input: one flag byte, then the text.  Flags: bit 0 the slot format
 * ("label slot:feasign") instead of libsvm; bit 1 gzip the text and read
 * it through a file (a memfd).  Without bit 1 the text is parsed both from
 * memory and from a plain file, and the two readers must agree: the same
 * status and, when accepted, the same samples.
 * Invariants: a refused text gives FL_EPROTO or FL_EINVAL (never FL_ENOMEM:
 * see replay.c) and a zeroed dataset; an accepted one has n >= 1, offsets from 0 rising to
 * the feature count, finite labels and values, slots below num_slots and
 * FL_SPARSE_MAX_SLOTS. */
#include <config.h>

#include <math.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_data.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (1 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

static fl_status load_file(const uint8_t *p, size_t n, int gz, fl_sparse_format fmt,
                           fl_sparse_dataset *out) {
  char path[64];
  uint8_t *z = gz ? fuzz_gzip(p, n, &n) : NULL;
  int fd = fuzz_memfile(z ? z : p, n, path, sizeof path);
  free(z);
  fl_status st = fl_sparse_load(path, fmt, out);
  close(fd);
  return st;
}

static void check_ok(const fl_sparse_dataset *d) {
  FUZZ_CHECK(d->n >= 1 && d->offsets && d->labels, "n %zu", d->n);
  FUZZ_CHECK(d->offsets[0] == 0, "offsets[0] %zu", d->offsets[0]);
  FUZZ_CHECK(d->prob == NULL, "prob set for a file");
  FUZZ_CHECK(d->num_slots <= FL_SPARSE_MAX_SLOTS, "num_slots %u", d->num_slots);
  for (size_t i = 0; i < d->n; i++) {
    FUZZ_CHECK(d->offsets[i] <= d->offsets[i + 1], "offsets fall at %zu", i);
    FUZZ_CHECK(isfinite(d->labels[i]), "label %zu", i);
  }
  for (size_t k = 0; k < d->offsets[d->n]; k++) {
    FUZZ_CHECK(d->feats[k].slot < d->num_slots, "slot %u of %u", d->feats[k].slot, d->num_slots);
    FUZZ_CHECK(isfinite(d->feats[k].value), "value of feature %zu", k);
  }
}

static int same(const fl_sparse_dataset *a, const fl_sparse_dataset *b) {
  if (a->n != b->n || a->num_slots != b->num_slots) return 0;
  if (memcmp(a->offsets, b->offsets, (a->n + 1) * sizeof *a->offsets)) return 0;
  if (memcmp(a->labels, b->labels, a->n * sizeof *a->labels)) return 0;
  for (size_t k = 0; k < a->offsets[a->n]; k++)
    if (a->feats[k].slot != b->feats[k].slot || a->feats[k].id != b->feats[k].id ||
        memcmp(&a->feats[k].value, &b->feats[k].value, sizeof(float)))
      return 0;
  return 1;
}

static void check_status(fl_status st, const fl_sparse_dataset *d) {
  if (st == FL_OK) {
    check_ok(d);
    return;
  }
  FUZZ_CHECK(st == FL_EPROTO || st == FL_EINVAL, "status %d", (int)st);
  FUZZ_CHECK(d->n == 0 && !d->labels && !d->offsets && !d->feats, "dataset not zeroed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fl_sparse_dataset a, b;
  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  fl_sparse_format fmt = (data[0] & 1) ? FL_SPARSE_SLOT : FL_SPARSE_LIBSVM;
  const uint8_t *text = data + 1;
  size_t len = size - 1;

  if (data[0] & 2) {
    fl_status st = load_file(text, len, 1, fmt, &a);
    check_status(st, &a);
    fl_sparse_dataset_free(&a);
    return 0;
  }
  fl_status sa = fl_sparse_load_mem((const char *)text, len, "fuzz.txt", fmt, &a);
  check_status(sa, &a);
  fl_status sb = load_file(text, len, 0, fmt, &b);
  check_status(sb, &b);
  FUZZ_CHECK(sa == sb, "memory reader says %d, file reader %d", (int)sa, (int)sb);
  FUZZ_CHECK(sa != FL_OK || same(&a, &b), "memory and file readers give different samples");
  fl_sparse_dataset_free(&a);
  fl_sparse_dataset_free(&b);
  return 0;
}
