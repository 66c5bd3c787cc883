/* ops_internal.h - what the op library's files (ops_*.c) share: the op
 * tables of each family, error reporting that names the node, attribute
 * readers that check the attribute's kind, output-shape setters and the
 * broadcasting iterator of the element-wise ops.  Never installed; the
 * engine sees only graph_internal.h.  Nothing here allocates: every pointer
 * taken or returned is into the engine's tensors and nodes (or the
 * caller's buffers) and stays theirs. */
#ifndef FL_GRAPH_OPS_INTERNAL_H
#define FL_GRAPH_OPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_log.h"
#include "graph_internal.h"

/* Each family's ops (ops_<family>.c), n entries. */
extern const fl_gop fl_gops_elementwise[];
extern const size_t fl_gops_elementwise_n;
extern const fl_gop fl_gops_linalg[];
extern const size_t fl_gops_linalg_n;
extern const fl_gop fl_gops_conv[];
extern const size_t fl_gops_conv_n;
extern const fl_gop fl_gops_norm[];
extern const size_t fl_gops_norm_n;
extern const fl_gop fl_gops_reduce[];
extern const size_t fl_gops_reduce_n;
extern const fl_gop fl_gops_shape[];
extern const size_t fl_gops_shape_n;
extern const fl_gop fl_gops_matrix[];
extern const size_t fl_gops_matrix_n;
extern const fl_gop fl_gops_resize[];
extern const size_t fl_gops_resize_n;
extern const fl_gop fl_gops_sparse[]; /* Flotilla's own (domain "flotilla") */
extern const size_t fl_gops_sparse_n;
extern const fl_gop fl_gops_embbag[]; /* Flotilla's own (domain "flotilla") */
extern const size_t fl_gops_embbag_n;
extern const fl_gop fl_gops_convt[];
extern const size_t fl_gops_convt_n;
extern const fl_gop fl_gops_activation[];
extern const size_t fl_gops_activation_n;
extern const fl_gop fl_gops_rnn[];
extern const size_t fl_gops_rnn_n;

/* Log "graph: node NAME (OP): message" once and return code. */
fl_status fl_gop_fail(const fl_gnode *n, fl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Attribute readers: the value of attribute name, or def when the node has
 * none; an attribute of another kind is FL_EINVAL (logged). */
fl_status fl_ga_int(const fl_gnode *n, const char *name, int64_t def, int64_t *out);
fl_status fl_ga_float(const fl_gnode *n, const char *name, float def, float *out);
fl_status fl_ga_str(const fl_gnode *n, const char *name, const char *def, const char **out);
/* INTS: *count = -1 when absent; more than max entries is FL_EINVAL. */
fl_status fl_ga_ints(const fl_gnode *n, const char *name, int64_t *out, int max, int *count);
/* The internal fused activation attribute FL_GRAPH_ACT_ATTR (absent = none). */
fl_status fl_ga_act(const fl_gnode *n, fl_act *act);

/* Input i must be present with dtype dt (FL_EINVAL logged otherwise). */
fl_status fl_gneed(const fl_gnode *n, const fl_gctx *c, int i, fl_gdtype dt);
/* Set output i's dtype, rank, shape and element count. */
void fl_gset_out(const fl_gnode *n, fl_gctx *c, int i, fl_gdtype dt, int ndim,
                 const int64_t *shape);
/* Elements of a shape (1 for rank 0). */
size_t fl_gnumel(int ndim, const int64_t *shape);
/* "[2,3,4]" into buf (for messages); returns buf. */
const char *fl_gshape_str(int ndim, const int64_t *shape, char *buf, size_t len);
/* The values of I64 input i, which infer needs known at bind (a shape,
 * axes, starts...): FL_EINVAL (logged, naming what) when absent, not I64,
 * or not computable at bind. */
fl_status fl_gknown_i64(const fl_gnode *n, const fl_gctx *c, int i, const char *what,
                        const int64_t **v, size_t *count);
/* Normalise axis a of a rank-r tensor into [0, r) (ONNX: negative counts
 * from the end); FL_EINVAL (logged, naming what) when out of range. */
fl_status fl_gaxis(const fl_gnode *n, int64_t a, int r, const char *what, int *out);

/* dst = src (accum 0) or dst += src (accum 1), n floats. */
void fl_gput(float *dst, const float *src, size_t n, int accum);
/* A kernel's status as the node's: CUDA and out-of-memory errors were
 * logged where they happened; anything else is logged here naming what. */
fl_status fl_gkernel(const fl_gnode *n, fl_status st, const char *what);

/* The device twin of fl_gput on c->stream (device pointers). */
fl_status fl_gcu_put(const fl_gnode *n, const fl_gctx *c, float *dst, const float *src,
                     size_t count, int accum);
/* Device copy of an output from its input for the ops that move no data
 * (Identity, Flatten, Reshape, Squeeze, Unsqueeze): forward and backward. */
fl_status fl_gcu_copy_forward(fl_gnode *n, fl_gctx *c);
fl_status fl_gcu_copy_backward(fl_gnode *n, fl_gctx *c, unsigned accum);
/* FL_EINVAL (logged) when the bound ws is smaller than need floats: a gpu
 * graph bound without c->stream set (see docs/DESIGN.md section 9). */
fl_status fl_gcu_need_ws(const fl_gnode *n, size_t need);

/* Winograd F(2x2, 3x3) convolution (ops_conv_wino.c) of images
 * [N, Cin, H, W] into [N, Cout, H, W]: 3x3 kernel, stride 1, pad 1, one
 * group.  The caller's buffers stay the caller's; ws is scratch of
 * fl_wino_ws(g) floats. */
typedef struct fl_wino {
  int64_t N, Cin, Cout, H, W;
} fl_wino;
size_t fl_wino_ws(const fl_wino *g);
/* y (+)= x convolved with w [Cout, Cin, 3, 3] plus bias b [Cout] (b may
 * be NULL); add: accumulate into y instead of writing it. */
void fl_wino_forward(const fl_wino *g, const float *w, const float *b, const float *x, float *y,
                     int add, float *ws);
/* dw [Cout, Cin, 3, 3] (+)= the gradient of that convolution's weight for
 * input x and output gradient dy. */
void fl_wino_dw(const fl_wino *g, const float *x, const float *dy, float *dw, int add,
                float *ws);

/* Window geometry of one 2-D convolution or pool over [N, C, H, W] input
 * images giving [oh, ow] output planes (ops_conv.c; a 1-D [N, C, L] input
 * is an image of height 1). */
typedef struct fl_gwin {
  int64_t N, C, H, W;     /* input */
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
  int64_t oh, ow;
  int ceil_mode;
  int one_d;              /* the input was [N, C, L] */
} fl_gwin;
/* The column matrix of Cg channels of one image x [Cg, H, W]:
 * col[(c*kh + i)*kw + j][oy*ow + ox] = x[c][oy*sh - pt + i*dh][ox*sw - pl + j*dw]
 * (0 outside the image), rows ld >= oh*ow floats apart.  Reads the
 * geometry's H, W, kernel, strides, dilations, pt, pl, oh and ow only. */
void fl_gim2col(const fl_gwin *g, int64_t Cg, const float *x, float *col, int64_t ld);
/* Its adjoint: dx [Cg, H, W] += col put back where fl_gim2col took it
 * from (col is scratch: its entries that stand for padding may be
 * zeroed).  Same geometry fields read. */
void fl_gcol2im_add(const fl_gwin *g, int64_t Cg, float *col, int64_t ld, float *dx);

/* Bit i of accum. */
static inline int fl_gacc(unsigned accum, int i) { return (int)((accum >> i) & 1u); }
/* The grad of input i when one is wanted, else NULL. */
static inline float *fl_gin_grad(const fl_gnode *n, const fl_gctx *c, int i) {
  const fl_gtensor *t = fl_gin(n, c, i);
  return t ? t->grad : NULL;
}

/* Broadcasting iterator over an output shape (operand 0) and up to three
 * inputs (operands 1..nops): dims of size 1 are dropped and adjacent dims
 * whose strides chain in every operand are merged, so the innermost loop is
 * as long as possible.  st[k][d] is operand k's element stride along merged
 * dim d (0 where it broadcasts). */
typedef struct fl_gbc {
  int nd;                         /* merged rank (0 for a scalar) */
  int nops;
  int64_t shape[FL_G_MAX_DIMS];
  int64_t st[4][FL_G_MAX_DIMS];
  size_t n;                       /* output elements */
} fl_gbc;
/* Set up b for output shape (ndim, shape) and nops inputs of the given
 * ranks and shapes, each of which broadcasts to the output (checked by the
 * caller with fl_gbroadcast_shape). */
void fl_gbc_init(fl_gbc *b, int ndim, const int64_t *shape, int nops, const int *ranks,
                 const int64_t *const *shapes);
/* Rows of the innermost merged dim: for row r (0 <= r < n / inner),
 * off[k] receives operand k's offset of the row's first element. */
static inline size_t fl_gbc_inner(const fl_gbc *b) {
  return b->nd ? (size_t)b->shape[b->nd - 1] : 1;
}
void fl_gbc_row(const fl_gbc *b, size_t r, size_t *off);
/* Sum g (of the output's shape) into dst, of operand k's shape of operand k's shape, scaled by
 * scale: dst = (accum ? dst : 0) + scale * sum over broadcast positions, in
 * output order (deterministic). */
void fl_gbc_reduce(const fl_gbc *b, int k, const float *g, float scale, float *dst, size_t dst_n,
                   int accum);

#endif
