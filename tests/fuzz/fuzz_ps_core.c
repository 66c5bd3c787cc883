/* fuzz_ps_core.c - every PServer request message, unpacked from hostile
 * bytes the way the service does (fl_rpc_unpack into the call's arena, or
 * protobuf-c's own allocator) and handed to the request checks and rules of
 * fl_ps_core, as pserver/server.c's dispatch does.
 *
 * Input: one setup byte, then framed requests {u8 method, u16 len, bytes}.
 * Setup bits: 0-1 the mode (sync, async, geo; 3 = sync), bit 2 start with
 * trainers 0 and 1 registered and every block of this server initialised
 * (so pushes reach the update rules), bit 3 unpack with protobuf-c's
 * allocator instead of the arena, bit 4 fp16 (else fp32) initial values.
 * The core is server 0 of 2 for 2 trainers, dense blocks of 4 floats,
 * sparse tables of at most 8 rows, at most 64 keys per call; a Register
 * declaring more than 4096 dense floats in all is skipped (the first
 * registration sizes the server's memory by design).
 * A PullDense carrying a commit takes the commit first, as the service does.
 * Invariants: a request refused with FL_EINVAL leaves every dense block
 * (value and step), every sparse table's row count and the push/update
 * counters as they were, and so does a read-only sparse pull, answered or
 * not (nor does it count a pull); every response packs; a pull's packed answer
 * reads back to the blocks' values. */
#include <config.h>

#include <string.h>

#include "fl_ps.h"
#include "fl_protocol.h"
#include "fl_ps_layout.h"
#include "fl_rpc.h"
#include "fuzz.h"
#include "fuzz_ps.h"

#define FUZZ_MAX_INPUT (256 * 1024)
#define MAX_BLOCK_IDS 64
#define BLOCK 4
#define MAX_DENSE_FLOATS 4096

/* Methods and their request types come from the wire's table
 * (fl_protocol.h), as in pserver/server.c: a method byte picks row
 * byte % FL_PROTO_COUNT. */

/* What a refused request must not change. */
typedef struct snapshot {
  int n;
  uint32_t id[MAX_BLOCK_IDS];
  int64_t step[MAX_BLOCK_IDS];
  float value[MAX_BLOCK_IDS][BLOCK];
  size_t rows;
  uint64_t evicted, pushes, pulls, dense_updates;
} snapshot;

typedef struct fuzz_state {
  fl_ps_core *core;
  fl_rpc_outbuf *ob;
  fl_rpc_inbuf in;
  float *scratch;
  size_t scratch_cap;
} fuzz_state;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

static void snap(fl_ps_core *c, snapshot *s) {
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  memset(s, 0, sizeof *s);
  for (uint32_t id = 0; id < MAX_BLOCK_IDS; id++) {
    float v[BLOCK];
    int64_t step;
    /* The call wants the block's exact size: try each one it can have. */
    for (size_t n = 1; n <= BLOCK; n++) {
      if (fl_ps_core_block_value(c, id, v, n, &step) != FL_OK) continue;
      s->id[s->n] = id;
      s->step[s->n] = step;
      memcpy(s->value[s->n], v, n * sizeof(float));
      s->n++;
      break;
    }
  }
  fl_ps_table *t = fl_ps_core_table(c, "emb");
  if (t) {
    s->rows = fl_ps_table_rows(t);
    s->evicted = fl_ps_table_evicted(t);
  }
  fl_ps_core_stats(c, &st);
  s->pushes = st.pushes;
  s->pulls = st.pulls;
  s->dense_updates = st.dense_updates;
}

static void pack_response(fuzz_state *f, const ProtobufCMessage *m) {
  grpc_byte_buffer *bb = NULL;
  FUZZ_CHECK(fl_rpc_pack(f->ob, m, &bb) == FL_OK, "packing a %s", m->descriptor->name);
  grpc_byte_buffer_destroy(bb);
}

/* A cleared pull, answered as the service does, read back and compared. */
static void answer_pull(fuzz_state *f, const uint32_t *ids, size_t n) {
  grpc_byte_buffer *bb = NULL;
  FUZZ_CHECK(fl_ps_core_pull_pack(f->core, 0, ids, n, f->ob, &bb) == FL_OK, "pull_pack");
  FUZZ_CHECK(fl_rpc_inbuf_read(&f->in, bb) == FL_OK, "inbuf_read");
  grpc_byte_buffer_destroy(bb);
  Flotilla__PullDenseResponse *r =
      flotilla__pull_dense_response__unpack(NULL, f->in.len, f->in.data);
  FUZZ_CHECK(r != NULL && r->n_blocks == n, "pull answer does not unpack");
  for (size_t i = 0; i < n; i++) {
    const Flotilla__DenseBlock *b = r->blocks[i];
    float v[BLOCK];
    int64_t step;
    size_t k = b->value ? b->value->data.len / sizeof(float) : 0;
    FUZZ_CHECK(b->block == ids[i] && k >= 1 && k <= BLOCK, "pulled block %u", b->block);
    FUZZ_CHECK(fl_ps_core_block_value(f->core, b->block, v, k, &step) == FL_OK, "block value");
    FUZZ_CHECK(!memcmp(v, b->value->data.data, k * sizeof(float)), "pulled block %u differs",
               b->block);
  }
  flotilla__pull_dense_response__free_unpacked(r, NULL);
}

/* A batch of sparse pulls or pushes as the server takes it (pserver/server.c):
 * its parts in order through the single-table calls, the first refused part
 * ending it (the parts before it stay applied). */
static fl_status sparse_batch(fuzz_state *f, int m, ProtobufCMessage *msg) {
  fl_status st = FL_OK;
  if (m == FL_PROTO_PUSH_SPARSE_BATCH) {
    const Flotilla__PushSparseBatchRequest *q = (const Flotilla__PushSparseBatchRequest *)msg;
    for (size_t i = 0; st == FL_OK && i < q->n_pushes; i++) {
      Flotilla__PushSparseResponse r = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
      st = fl_ps_core_push_sparse(f->core, q->pushes[i], &r);
    }
    return st;
  }
  const Flotilla__PullSparseBatchRequest *q = (const Flotilla__PullSparseBatchRequest *)msg;
  for (size_t i = 0; st == FL_OK && i < q->n_pulls; i++) {
    Flotilla__PullSparseResponse r = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
    Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
    int64_t shape[2];
    st = fl_ps_core_pull_sparse(f->core, q->pulls[i], &f->scratch, &f->scratch_cap, &r, &v, shape);
    if (st == FL_OK) pack_response(f, &r.base);
  }
  return st;
}

static void handle(fuzz_state *f, int m, ProtobufCMessage *msg) {
  fl_ps_core *core = f->core;
  fl_status st = FL_OK;
  snapshot before, after;
  int committed = 0; /* a PullDense's commit went through (it may apply a step) */

  if (m == FL_PROTO_REGISTER) {
    const Flotilla__RegisterRequest *q = (const Flotilla__RegisterRequest *)msg;
    uint64_t total = 0;
    for (size_t i = 0; i < q->n_dense; i++) {
      total += q->dense[i]->numel > MAX_DENSE_FLOATS ? MAX_DENSE_FLOATS + 1 : q->dense[i]->numel;
      if (total > MAX_DENSE_FLOATS) return;
    }
  }
  snap(core, &before);
  switch (m) {
  case FL_PROTO_REGISTER: {
    Flotilla__RegisterResponse r = FLOTILLA__REGISTER_RESPONSE__INIT;
    st = fl_ps_core_register(core, (Flotilla__RegisterRequest *)msg, &r);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_PUSH_DENSE: {
    Flotilla__PushDenseResponse r = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
    st = fl_ps_core_push_dense(core, (Flotilla__PushDenseRequest *)msg, &r);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_PULL_DENSE: {
    const Flotilla__PullDenseRequest *q = (const Flotilla__PullDenseRequest *)msg;
    if (q->committed > 0) { /* the commit first, as the service takes it */
      st = fl_ps_core_commit(core, q->trainer_id, q->committed);
      if (st != FL_OK || q->n_blocks == 0) break;
      committed = 1;
    }
    st = fl_ps_core_pull_check(core, q->trainer_id, q->min_step, q->blocks, q->n_blocks);
    if (st == FL_OK) answer_pull(f, q->blocks, q->n_blocks);
    break;
  }
  case FL_PROTO_PULL_SPARSE: {
    Flotilla__PullSparseResponse r = FLOTILLA__PULL_SPARSE_RESPONSE__INIT;
    Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
    int64_t shape[2];
    st = fl_ps_core_pull_sparse(core, (Flotilla__PullSparseRequest *)msg, &f->scratch,
                                &f->scratch_cap, &r, &v, shape);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_PUSH_SPARSE: {
    Flotilla__PushSparseResponse r = FLOTILLA__PUSH_SPARSE_RESPONSE__INIT;
    st = fl_ps_core_push_sparse(core, (Flotilla__PushSparseRequest *)msg, &r);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_INIT_SPARSE: {
    Flotilla__InitSparseResponse r = FLOTILLA__INIT_SPARSE_RESPONSE__INIT;
    st = fl_ps_core_init_sparse(core, (Flotilla__InitSparseRequest *)msg, &r);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_DUMP_SPARSE: {
    Flotilla__DumpSparseResponse r = FLOTILLA__DUMP_SPARSE_RESPONSE__INIT;
    Flotilla__Tensor v = FLOTILLA__TENSOR__INIT;
    fl_ps_dump_buf buf = {NULL, NULL, 0, 0};
    int64_t shape[2];
    st = fl_ps_core_dump_sparse(core, (Flotilla__DumpSparseRequest *)msg, &buf, &r, &v, shape);
    if (st == FL_OK) pack_response(f, &r.base);
    free(buf.keys);
    free(buf.vals);
    break;
  }
  case FL_PROTO_BARRIER: {
    const Flotilla__BarrierRequest *q = (const Flotilla__BarrierRequest *)msg;
    st = fl_ps_core_barrier(core, q);
    if (st == FL_OK || st == FL_EAGAIN) {
      Flotilla__BarrierResponse r = FLOTILLA__BARRIER_RESPONSE__INIT;
      double buf[FL_PS_BARRIER_MAX_VALUES];
      fl_status rs = fl_ps_core_barrier_result(core, q->name, q->trainer_id, &r, buf);
      FUZZ_CHECK(rs == (st == FL_OK ? FL_OK : FL_EAGAIN) || (st == FL_OK && rs == FL_ESTATE),
                 "barrier %d, its result %d", (int)st, (int)rs);
      if (rs == FL_OK) pack_response(f, &r.base);
    }
    break;
  }
  case FL_PROTO_HEARTBEAT: {
    Flotilla__HeartbeatResponse r = FLOTILLA__HEARTBEAT_RESPONSE__INIT;
    st = fl_ps_core_heartbeat(core, (Flotilla__HeartbeatRequest *)msg, &r);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_COMPLETE: {
    Flotilla__CompleteResponse r = FLOTILLA__COMPLETE_RESPONSE__INIT;
    st = fl_ps_core_complete(core, (Flotilla__CompleteRequest *)msg, &r);
    if (st == FL_OK) pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_STATS: {
    Flotilla__StatsResponse r = FLOTILLA__STATS_RESPONSE__INIT;
    fl_ps_core_stats(core, &r);
    pack_response(f, &r.base);
    break;
  }
  case FL_PROTO_PULL_SPARSE_BATCH:
  case FL_PROTO_PUSH_SPARSE_BATCH:
    st = sparse_batch(f, m, msg);
    break;
  default: /* Save / Load: the service hands only the step to its callbacks; Health: no
            * state (the request is unpacked all the same) */
    break;
  }
  FUZZ_CHECK(st == FL_OK || st == FL_EINVAL || st == FL_ESTATE || st == FL_EAGAIN,
             "method %d: status %d", m, (int)st);
  if (m == FL_PROTO_PULL_SPARSE_BATCH || m == FL_PROTO_PUSH_SPARSE_BATCH || committed)
    return; /* a refused part may follow applied ones (a refused pull, its commit) */
  if (st != FL_EINVAL && m != FL_PROTO_DUMP_SPARSE &&
      !(m == FL_PROTO_PULL_SPARSE && ((const Flotilla__PullSparseRequest *)msg)->read_only))
    return;
  snap(core, &after);
  FUZZ_CHECK(before.n == after.n && before.rows == after.rows && before.evicted == after.evicted &&
                 before.pushes == after.pushes && before.pulls == after.pulls &&
                 before.dense_updates == after.dense_updates,
             "method %d refused or read-only (%s) but the state changed", m,
             fl_ps_core_last_error());
  for (int i = 0; i < before.n; i++)
    FUZZ_CHECK(before.id[i] == after.id[i] && before.step[i] == after.step[i] &&
                   !memcmp(before.value[i], after.value[i], sizeof before.value[i]),
               "method %d refused or read-only (%s) but block %u changed", m,
               fl_ps_core_last_error(), before.id[i]);
}

/* Trainers 0 and 1 registered with two dense parameters (10 and 3 floats)
 * and a sparse table, and every block of this server given a value. */
static void prepare(fuzz_state *f, fl_ps_mode mode, int fp16) {
  for (int t = 0; t < 2; t++)
    FUZZ_CHECK(fuzz_ps_register(f->core, t, mode, BLOCK, 1000) == FL_OK, "register %d: %s", t,
               fl_ps_core_last_error());
  /* This server's blocks, as the core placed them. */
  uint64_t numel[2] = {10, 3};
  fl_ps_layout *l;
  FUZZ_CHECK(fl_ps_layout_build(numel, 2, BLOCK, 2, &l) == FL_OK, "layout");
  for (uint32_t id = 0; id < l->n_blocks; id++) {
    float v[BLOCK];
    uint16_t h[BLOCK];
    int64_t shape[1];
    size_t n = l->blocks[id].n;
    if (l->blocks[id].server != 0) continue;
    Flotilla__PushDenseRequest q = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
    Flotilla__PushDenseResponse r = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
    Flotilla__DenseBlock db = FLOTILLA__DENSE_BLOCK__INIT, *dbs[1] = {&db};
    Flotilla__Tensor x = FLOTILLA__TENSOR__INIT;
    for (size_t k = 0; k < n; k++) {
      v[k] = 0.25f * (float)(id + k) - 1.0f;
      h[k] = (uint16_t)(0x3c00u + 0x100u * (id + k)); /* fp16 1, 2, 4, ... */
    }
    shape[0] = (int64_t)n;
    x.dtype = fp16 ? FLOTILLA__DTYPE__DTYPE_FP16 : FLOTILLA__DTYPE__DTYPE_FP32;
    x.n_shape = 1;
    x.shape = shape;
    x.data.data = fp16 ? (uint8_t *)h : (uint8_t *)v;
    x.data.len = n * (fp16 ? 2 : 4);
    db.block = id;
    db.value = &x;
    q.trainer_id = 0;
    q.kind = FLOTILLA__PUSH_KIND__PUSH_INIT;
    q.n_blocks = 1;
    q.blocks = dbs;
    FUZZ_CHECK(fl_ps_core_push_dense(f->core, &q, &r) == FL_OK, "init block %u: %s", id,
               fl_ps_core_last_error());
  }
  fl_ps_layout_free(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_state f;
  fl_rpc_arena arena;

  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  uint8_t setup = data[0];
  static const fl_ps_mode modes[4] = {FL_PS_SYNC, FL_PS_ASYNC, FL_PS_GEO, FL_PS_SYNC};
  fl_ps_mode mode = modes[setup & 3];

  memset(&f, 0, sizeof f);
  f.core = fuzz_ps_core_new(mode, BLOCK);
  FUZZ_CHECK(fl_rpc_outbuf_create(0, &f.ob) == FL_OK, "outbuf_create");
  fl_rpc_arena_init(&arena);
  if (setup & 4) prepare(&f, mode, setup & 16);

  size_t pos = 1;
  while (size - pos >= 3) {
    int m = data[pos] % FL_PROTO_COUNT;
    size_t len = fuzz_u16(data + pos + 1);
    pos += 3;
    if (len > size - pos) len = size - pos;
    ProtobufCMessage *msg;
    if (setup & 8) {
      msg = protobuf_c_message_unpack(fl_proto_methods[m].rpc.req, NULL, len, data + pos);
    } else {
      fl_rpc_arena_reset(&arena);
      msg = fl_rpc_unpack(&arena, fl_proto_methods[m].rpc.req, data + pos, len);
    }
    pos += len;
    if (!msg) continue; /* the service answers INVALID_ARGUMENT "malformed message" */
    handle(&f, m, msg);
    if (setup & 8) protobuf_c_message_free_unpacked(msg, NULL);
  }
  fl_rpc_arena_free(&arena);
  fl_rpc_inbuf_free(&f.in);
  fl_rpc_outbuf_free(f.ob);
  free(f.scratch);
  fl_ps_core_free(f.core);
  return 0;
}
