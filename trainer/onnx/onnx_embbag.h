/* onnx_embbag.h - the importer's rewrite of PyTorch's nn.EmbeddingBag
 * export (a Loop over the bags) into one EmbeddingBag node
 * (onnx_embbag.c); never installed. */
#ifndef FL_ONNX_EMBBAG_H
#define FL_ONNX_EMBBAG_H

#include "fl_status.h"
#include "onnx.pb-c.h"

typedef struct fl_onnx_embbag fl_onnx_embbag;

/* Match every Loop of g against PyTorch's nn.EmbeddingBag export.  *out:
 * NULL when no Loop is one, else the caller's (fl_onnx_embbag_free),
 * valid while g is: it borrows g's nodes and strings, g is not changed.
 * A Loop that is an embedding bag in a form not supported is refused
 * (FL_ENOTSUP, logged naming path, node and mode); FL_ENOMEM. */
fl_status fl_onnx_embbag_rewrite(const char *path, const Onnx__GraphProto *g,
                                 fl_onnx_embbag **out);
/* The graph to import: g with the matched Loops replaced (rw's), or g
 * itself when rw is NULL. */
const Onnx__GraphProto *fl_onnx_embbag_graph(const fl_onnx_embbag *rw,
                                             const Onnx__GraphProto *g);
/* 1 when n is a node the rewrite made (an EmbeddingBag of Flotilla's own
 * domain, which the importer refuses from a file). */
int fl_onnx_embbag_made(const fl_onnx_embbag *rw, const Onnx__NodeProto *n);
void fl_onnx_embbag_free(fl_onnx_embbag *rw);

#endif
