/* model_internal.h - what the model files of trainer/ share (never installed).
 *
 * The built-in models (logreg, mlp, cnn) and imported ONNX models are op
 * graphs run by the graph engine (graph/): the presets only describe their
 * graphs.  The engine and the plugin loader both speak fl_model_ops, the
 * same table a plugin exports, so model.c dispatches one way for all. */
#ifndef FL_MODEL_INTERNAL_H
#define FL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_layers.h"
#include "fl_graph.h"
#include "fl_model.h"

#define FL_MODEL_HIDDEN __attribute__((visibility("hidden")))

/* ------------------------------------------------------------ the presets */

/* Checkpoints a preset names: at most one per linear layer. */
#define FL_MODEL_MAX_CKPT (FL_MODEL_MAX_HIDDEN + 2)
/* Names in each of fl_model_spec.amp_white / amp_black. */
#define FL_MODEL_MAX_AMP_LIST 16

/* The graph of a built-in kind (logreg, mlp, cnn) for a resolved spec,
 * parameters initialised from seed (model_presets.c).  ckpt[0..*n_ckpt)
 * receive the names of its default recompute checkpoints.  On success the
 * caller owns *out (fl_graph_model_create takes it).  Errors are logged:
 * FL_EINVAL for a spec the kind cannot build, FL_ENOMEM. */
FL_MODEL_HIDDEN fl_status fl_graph_preset(const fl_model_spec *spec, uint64_t seed,
                                          fl_graph **out, char ckpt[][FL_MODEL_NAME_MAX],
                                          size_t *n_ckpt);

/* Open the plugin at path: dlopen, look up FL_MODEL_PLUGIN_SYMBOL, check its
 * ABI version and that every entry is set.  On success *ops points into the
 * library and *dl is its handle for dlclose.  Errors are logged here, naming
 * the path: FL_ENOTFOUND (no such file, or no symbol), FL_EINVAL (not a
 * loadable library, wrong ABI version, a missing entry). */
FL_MODEL_HIDDEN fl_status fl_model_plugin_open(const char *path, const fl_model_ops **ops,
                                               void **dl);

/* ------------------------------------------------------- wrapped graphs */

struct fl_sparse_hooks;

/* An fl_model over the compiled graph `graph` (fl_graph_model_create) that
 * spec describes, with the sparse hooks and their self (NULL: none).  The
 * model takes graph and self whatever happens (destroyed with it, or here
 * on failure).  FL_ENOMEM (logged). */
FL_MODEL_HIDDEN fl_status fl_model_wrap_graph(const fl_model_spec *spec, void *graph,
                                              size_t max_batch,
                                              const struct fl_sparse_hooks *hooks, void *self,
                                              fl_model **out);

/* An edit of a graph before it is compiled (fl_model_create_edited):
 * FL_OK, or an error it logged. */
typedef fl_status (*fl_model_edit_fn)(fl_graph *g, void *ctx);

/* fl_model_create of a graph kind with edit(g, ctx) applied to its graph
 * (a preset's or the ONNX file's) before it is compiled; ctx is the
 * caller's and only read during the call.  The caller owns *out. */
FL_MODEL_HIDDEN fl_status fl_model_create_edited(const fl_model_spec *spec, size_t max_batch,
                                                 uint64_t seed, fl_model_edit_fn edit,
                                                 void *ctx, fl_model **out);

/* Attach sparse hooks and their self to m (which then destroys self). */
FL_MODEL_HIDDEN void fl_model_set_sparse(fl_model *m, const struct fl_sparse_hooks *hooks,
                                         void *self);

/* The compiled graph handle of m (fl_graph_model_*, m's), or NULL for a
 * plugin. */
FL_MODEL_HIDDEN void *fl_model_graph_handle(fl_model *m);

/* What a model kind's build function gets: the job and the spec built from
 * it (fl_trainer_model_spec), the batch capacity and seed, and for a kind
 * with sparse tables the sparse data (test may be empty). */
typedef struct fl_model_build_args {
  const struct fl_job *job;
  const fl_model_spec *spec;
  size_t max_batch;
  uint64_t seed;
  const struct fl_sparse_dataset *train, *test;
} fl_model_build_args;

typedef fl_status (*fl_model_build_fn)(const fl_model_build_args *a, fl_model **out);

/* The model of kind a->spec->kind, by the build function model.c attaches
 * to its row of fl_model_kinds (fl_model_kind.h).  The caller owns *out.
 * FL_EINVAL (logged) for no kind; the build function's errors. */
FL_MODEL_HIDDEN fl_status fl_model_build(const fl_model_build_args *a, fl_model **out);

/* model.kind ctr (model_ctr.c): the wide & deep graph sized from the
 * sparse data, with its sparse hooks.  The caller owns *out.  FL_EINVAL
 * (logged) without sparse training data; errors of fl_ctr_graph. */
FL_MODEL_HIDDEN fl_status fl_ctr_model_create(const fl_model_build_args *a, fl_model **out);

/* model.kind onnx with pserver.sparse_tables (model_sparse_graph.c): the
 * ONNX graph with those initializers as sparse tables on the pservers.
 * The caller owns *out.  FL_EINVAL / FL_ENOTSUP (logged) for a table the
 * graph cannot keep sparse; the graph's errors. */
FL_MODEL_HIDDEN fl_status fl_sparse_graph_model_create(const fl_model_build_args *a,
                                                       fl_model **out);

/* ------------------------------------------------------------------ init */

/* Fill w[0..n) with uniform values in [-bound, bound) drawn from a
 * splitmix64 stream keyed by (seed, stream): the same arguments give the
 * same bits on every machine. */
FL_MODEL_HIDDEN void fl_model_init_uniform(float *w, size_t n, float bound, uint64_t seed,
                                           uint64_t stream);

#endif
