/* model_kind.c - the model kinds table (fl_model_kind.h). */
#include <config.h>

#include "fl_model_kind.h"
#include "fl_names.h"

/* One line per kind: its index, name and flags; both tables below come
 * from it, so they cannot disagree. */
#define ROWS(X)                                                   \
  X(FL_MODEL_KIND_LOGREG, "logreg", FL_KIND_GPU | FL_KIND_EXPORT) \
  X(FL_MODEL_KIND_MLP, "mlp", FL_KIND_GPU | FL_KIND_EXPORT)       \
  X(FL_MODEL_KIND_CNN, "cnn", FL_KIND_GPU | FL_KIND_EXPORT | FL_KIND_CONV) \
  X(FL_MODEL_KIND_PLUGIN, "plugin", FL_KIND_PLUGIN)               \
  X(FL_MODEL_KIND_CTR, "ctr", FL_KIND_SPARSE)                     \
  X(FL_MODEL_KIND_ONNX, "onnx", FL_KIND_GPU | FL_KIND_EXPORT | FL_KIND_FILE)

#define ROW(i, n, f) [i] = {n, f},
#define NAME(i, n, f) [i] = n,
const fl_model_kind fl_model_kinds[FL_MODEL_KINDS] = {ROWS(ROW)};
const char *const fl_model_kind_names[FL_MODEL_KINDS + 1] = {ROWS(NAME)[FL_MODEL_KINDS] = NULL};

int fl_model_kind_index(const char *name) { return fl_names_find(fl_model_kind_names, name); }

int fl_model_kind_has(const char *name, unsigned flags) {
  const int i = fl_model_kind_index(name);
  return i >= 0 && (fl_model_kinds[i].flags & flags) == flags;
}
