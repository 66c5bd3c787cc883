/* onnx_lint.c - warnings for models that import but were exported from
 * PyTorch the wrong way for training (fl_onnx_lint, onnx_internal.h).
 *
 * Why: such a file loads and trains without an error, yet not the model
 * its author meant: an eval-mode export (batch norm with training_mode 0,
 * Dropout left out, batch norm folded into convolutions), constant
 * folding's anonymous weights (a trained file whose weights cannot be put
 * back into the PyTorch module by name), a batch size baked into the
 * graph.  Each rule is one row of rules[]; it warns at most once per model,
 * naming the file, its first offender, how many more, and the export
 * argument that avoids it.  The rules only read the ModelProto. */
#include <config.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_internal.h"
#include "onnx_internal.h"

/* What the rules see. */
typedef struct lint {
  const char *path;
  const Onnx__GraphProto *g;
  int64_t opset;                /* of the default domain, -1 if none */
  const char **inits;           /* the initializers' names, sorted */
  size_t n_inits;
} lint;

static const char *S(const char *s) { return s ? s : ""; }

static const char *node_label(const Onnx__NodeProto *n) {
  if (n->name && n->name[0]) return n->name;
  if (n->n_output && n->output[0] && n->output[0][0]) return n->output[0];
  return "<unnamed>";
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_init(const lint *L, const char *name) {
  return L->inits && bsearch(&name, L->inits, L->n_inits, sizeof *L->inits, cmp_str) != NULL;
}

/* " and N more" (empty for none) into buf. */
static const char *more(char *buf, size_t cap, size_t extra, const char *what) {
  buf[0] = '\0';
  if (extra) snprintf(buf, cap, " and %zu more %s", extra, what);
  return buf;
}

/* ------------------------------------------------------------- rules */

/* BatchNormalization whose training_mode is 0 (absent: ONNX's default) at
 * opset 14 and later, where the attribute exists: torch.onnx's eval-mode
 * export.  Opset 13 has no such attribute, and a model without Dropout is
 * no evidence either way, so nothing is said there. */
static void lint_bn_eval(const lint *L) {
  if (L->opset < 14) return;
  const Onnx__NodeProto *first = NULL;
  size_t count = 0;
  for (size_t i = 0; i < L->g->n_node; i++) {
    const Onnx__NodeProto *n = L->g->node[i];
    const fl_gop *op = n ? fl_gop_find(S(n->op_type)) : NULL;
    if (!op || !op->buffer_in || op->domain) continue; /* an op with running statistics */
    int64_t tm = 0;
    for (size_t a = 0; a < n->n_attribute; a++)
      if (n->attribute[a] && !strcmp(S(n->attribute[a]->name), "training_mode"))
        tm = n->attribute[a]->i;
    if (tm) continue;
    if (!first) first = n;
    count++;
  }
  if (!first) return;
  /* Equal initializers are merged by the export: a fresh BN's statistics
   * become Identity copies of its scale and bias, computed anew each step. */
  const char *copied = NULL;
  for (size_t j = 3; j < 5 && j < first->n_input; j++)
    if (!copied && S(first->input[j])[0] && !is_init(L, first->input[j])) copied = first->input[j];
  char m[96];
  more(m, sizeof m, count - 1, "such nodes");
  if (copied)
    FL_LOGW("%s: node '%s' (BatchNormalization)%s was exported in eval mode (training_mode 0): "
            "its running statistic '%s' is computed by a node (the export merged it with an "
            "equal tensor), not stored, so the running statistics will never update; an eval "
            "export also leaves out Dropout.  Export with "
            "training=torch.onnx.TrainingMode.TRAINING", L->path, node_label(first), m, copied);
  else
    FL_LOGW("%s: node '%s' (BatchNormalization)%s was exported in eval mode (training_mode 0): "
            "Flotilla updates its running statistics in training all the same, but other tools "
            "read the file as inference-only (they never update them) and an eval export leaves "
            "out Dropout.  Export with training=torch.onnx.TrainingMode.TRAINING",
            L->path, node_label(first), m);
}

/* onnx::<Op>_<n>: a name torch.onnx gives what constant folding (or the
 * eval export's folding of BatchNormalization into Conv) computed. */
static int anonymous(const char *s) {
  if (strncmp(s, "onnx::", 6)) return 0;
  s += 6;
  if (!isalpha((unsigned char)*s)) return 0;
  const char *u = strrchr(s, '_');
  if (!u || !u[1]) return 0;
  for (const char *p = s; p < u; p++)
    if (!isalnum((unsigned char)*p) && *p != '_') return 0;
  for (const char *p = u + 1; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  return 1;
}

/* Float initializers (the weights) with such names. */
static void lint_anonymous(const lint *L) {
  const char *first = NULL;
  size_t count = 0;
  for (size_t i = 0; i < L->g->n_initializer; i++) {
    const Onnx__TensorProto *t = L->g->initializer[i];
    if (!t || !t->has_data_type || t->data_type != FL_ONNX_FLOAT || !anonymous(S(t->name)))
      continue;
    if (!first) first = t->name;
    count++;
  }
  if (!first) return;
  char m[96];
  FL_LOGW("%s: initializer '%s'%s has an anonymous name from constant folding (onnx::<Op>_<n>): "
          "its trained value cannot be loaded back into the PyTorch module by name.  Export "
          "with do_constant_folding=False and training=torch.onnx.TrainingMode.TRAINING (an "
          "eval export folds BatchNormalization into Conv weights whatever the folding flag)",
          L->path, first, more(m, sizeof m, count - 1, "such initializers"));
}

/* The data input (the first graph input that is no initializer) with a
 * number, not a name, as its dim 0. */
static void lint_fixed_batch(const lint *L) {
  for (size_t i = 0; i < L->g->n_input; i++) {
    const Onnx__ValueInfoProto *vi = L->g->input[i];
    if (!vi || is_init(L, S(vi->name))) continue;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
        !tp->tensor_type->shape || !tp->tensor_type->shape->n_dim)
      return;
    const Onnx__TensorShapeProto__Dimension *d0 = tp->tensor_type->shape->dim[0];
    if (d0 && d0->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
      FL_LOGW("%s: graph input '%s' has a fixed batch dimension of %lld: only that batch size "
              "can be relied on to run (shapes the export computed from it are constants); "
              "export with dynamic_axes={'%s': {0: 'batch'}}", L->path, S(vi->name),
              (long long)d0->dim_value, S(vi->name));
    return;
  }
}

static void (*const rules[])(const lint *) = {lint_bn_eval, lint_anonymous, lint_fixed_batch};

/* ------------------------------------------------------------- entry */

static int64_t default_opset(const Onnx__ModelProto *m) {
  int64_t v = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (o && (!S(o->domain)[0] || !strcmp(o->domain, "ai.onnx")))
      v = o->has_version ? o->version : 0;
  }
  return v;
}

fl_status fl_onnx_lint(const Onnx__ModelProto *m, const char *path) {
  if (!m || !m->graph) return FL_OK;
  lint L = {.path = path ? path : "<memory>", .g = m->graph, .opset = default_opset(m)};
  const Onnx__GraphProto *g = m->graph;
  L.inits = malloc((g->n_initializer ? g->n_initializer : 1) * sizeof *L.inits);
  if (!L.inits) return FL_ERR(FL_ENOMEM, "%s: out of memory", L.path);
  for (size_t i = 0; i < g->n_initializer; i++)
    if (g->initializer[i]) L.inits[L.n_inits++] = S(g->initializer[i]->name);
  qsort(L.inits, L.n_inits, sizeof *L.inits, cmp_str);
  for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) rules[r](&L);
  free(L.inits);
  return FL_OK;
}
