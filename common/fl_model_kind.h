/* fl_model_kind.h - the model kinds (model.kind), one table of their names
 * and of what each can do.  The job file's checks (config.c), the trainer's
 * device and export checks and its model builders (trainer/, which attaches
 * a build function to each row by its index) all read this table: no code
 * compares kind names. */
#ifndef FL_MODEL_KIND_H
#define FL_MODEL_KIND_H

/* What a kind can do or needs. */
enum {
  FL_KIND_GPU = 1u << 0,    /* computes on a CUDA device with train.device gpu */
  FL_KIND_EXPORT = 1u << 1, /* train.export_onnx / --export-onnx write it as ONNX */
  FL_KIND_SPARSE = 1u << 2, /* sparse tables on the pservers: sparse data, ps mode */
  FL_KIND_FILE = 1u << 3,   /* read from an ONNX file (model.path, output, loss) */
  FL_KIND_PLUGIN = 1u << 4, /* a loaded library (model.plugin_path) */
  FL_KIND_CONV = 1u << 5    /* convolutions (conv_kernel, gn_groups) */
};

/* The rows, by index (trainer/ keys its build functions on these). */
enum {
  FL_MODEL_KIND_LOGREG,
  FL_MODEL_KIND_MLP,
  FL_MODEL_KIND_CNN,
  FL_MODEL_KIND_PLUGIN,
  FL_MODEL_KIND_CTR,
  FL_MODEL_KIND_ONNX,
  FL_MODEL_KINDS
};

typedef struct fl_model_kind {
  const char *name;
  unsigned flags;
} fl_model_kind;

extern const fl_model_kind fl_model_kinds[FL_MODEL_KINDS];
/* The names in row order, NULL-terminated (the job file's choices). */
extern const char *const fl_model_kind_names[FL_MODEL_KINDS + 1];

/* The row index of name, or -1 for no kind. */
int fl_model_kind_index(const char *name);
/* Whether kind name has every flag of flags (0 for no kind). */
int fl_model_kind_has(const char *name, unsigned flags);

#endif
