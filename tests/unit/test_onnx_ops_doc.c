/* test_onnx_ops_doc.c - docs/ONNX_OPS.md is the op table's: this program
 * renders the page from the rows of trainer/graph's op table (type, the
 * opsets a row implements, inputs, outputs, attributes, gradient, CUDA
 * twin, its doc line) and fails when the committed page differs, printing
 * the first line that does.  With FL_WRITE_DOC=1 it writes the page
 * instead (`make onnx-ops-doc`). */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_onnx.h"
#include "graph_internal.h"

/* Append the formatted text to the growing page (*buf, *len), exiting on
 * out-of-memory (a test program). */
static void put(char **buf, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(char **buf, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  const int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  char *b = n < 0 ? NULL : realloc(*buf, *len + (size_t)n + 1);
  if (!b) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  memcpy(b + *len, s, (size_t)n + 1);
  *len += (size_t)n;
  *buf = b;
  free(s);
}

/* "a, b" of a row's attributes, the internal activation one left out. */
static void attrs_of(const fl_gop *op, char *out, size_t cap) {
  out[0] = '\0';
  for (const char *const *a = op->attrs; a && *a; a++) {
    if (!strcmp(*a, FL_GRAPH_ACT_ATTR)) continue;
    const size_t len = strlen(out);
    snprintf(out + len, cap - len, "%s`%s`", len ? ", " : "", *a);
  }
  if (!out[0]) snprintf(out, cap, "none");
}

static void range_of(char *out, size_t cap, int lo, int hi) {
  if (lo > hi) snprintf(out, cap, "none (from %d)", lo);
  else if (lo == hi) snprintf(out, cap, "%d", lo);
  else snprintf(out, cap, "%d..%d", lo, hi);
}

static void row(char **buf, size_t *len, const fl_gop *op) {
  char attrs[512], opsets[32], ins[32], outs[32];
  attrs_of(op, attrs, sizeof attrs);
  if (op->domain)
    snprintf(opsets, sizeof opsets, "(%s)", op->domain);
  else
    range_of(opsets, sizeof opsets, op->opset_min ? op->opset_min : FL_ONNX_OPSET_MIN,
             op->opset_max ? op->opset_max : FL_ONNX_OPSET_MAX);
  range_of(ins, sizeof ins, op->min_in, op->max_in);
  range_of(outs, sizeof outs, op->min_out, op->max_out);
  put(buf, len, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", op->type, opsets, ins, outs,
      attrs, op->backward ? "yes" : "no", op->forward_cuda ? "yes" : "no",
      op->doc ? op->doc : "");
}

/* The whole page into a new string (the caller's). */
static char *render(void) {
  char *buf = NULL;
  size_t len = 0;
  put(&buf, &len, "# ONNX ops the importer takes\n\n"
      "Generated from the op table of `trainer/graph/` (each row's type, opsets, inputs,\n"
      "outputs, attributes, gradient, CUDA twin and doc line) by\n"
      "`tests/unit/test_onnx_ops_doc`, which fails when this page and the table disagree;\n"
      "`make onnx-ops-doc` rewrites it. The importer takes opsets %d to %d of the default\n"
      "domain; a node outside its row's opsets, an attribute not listed, or an op not\n"
      "listed is refused naming the file, the node and the op. Attributes not listed are\n"
      "refused, not ignored. \"gradient: no\" ops pass none (shapes, indices, masks).\n\n"
      "| op | opsets | inputs | outputs | attributes | gradient | CUDA | notes and refusals |\n"
      "|---|---|---|---|---|---|---|---|\n", FL_ONNX_OPSET_MIN, FL_ONNX_OPSET_MAX);
  for (size_t i = 0; fl_gop_at(i); i++)
    if (!fl_gop_at(i)->domain) row(&buf, &len, fl_gop_at(i));
  put(&buf, &len, "\n## Flotilla's own ops\n\n"
      "Built by Flotilla's models only: the importer refuses them in a file.\n\n"
      "| op | opsets | inputs | outputs | attributes | gradient | CUDA | notes and refusals |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; fl_gop_at(i); i++)
    if (fl_gop_at(i)->domain) row(&buf, &len, fl_gop_at(i));
  return buf;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0, n;
  char chunk[4096];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n + 1 > cap) {
      cap = 2 * (len + n + 1);
      char *b = realloc(buf, cap);
      if (!b) break;
      buf = b;
    }
    memcpy(buf + len, chunk, n);
    len += n;
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

int main(void) {
  const char *src = getenv("FL_SRCDIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/docs/ONNX_OPS.md", src ? src : "..");
  char *page = render();
  if (getenv("FL_WRITE_DOC")) {
    FILE *f = fopen(path, "wb");
    if (!f || fputs(page, f) < 0 || fclose(f) != 0) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
    printf("wrote %s\n", path);
    free(page);
    return 0;
  }
  char *doc = slurp(path);
  int line = 1, rc = 0;
  if (!doc) {
    fprintf(stderr, "FAIL: cannot read %s (make onnx-ops-doc writes it)\n", path);
    rc = 1;
  } else if (strcmp(doc, page) != 0) {
    size_t i = 0;
    for (; doc[i] && doc[i] == page[i]; i++) line += doc[i] == '\n';
    const char *a = doc + i, *b = page + i;
    while (a > doc && a[-1] != '\n') a--, b--;
    fprintf(stderr, "FAIL: %s differs from the op table at line %d:\n  page:  %.*s\n  table: %.*s\n"
            "(run `make onnx-ops-doc` after changing an op row)\n", path, line,
            (int)strcspn(a, "\n"), a, (int)strcspn(b, "\n"), b);
    rc = 1;
  } else {
    printf("PASS: %s matches the op table\n", path);
  }
  free(doc);
  free(page);
  return rc;
}
