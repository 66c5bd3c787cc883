/* fl_protocol.h - what flotilla-pserver and its clients agree on, written
 * once: the methods of the wire (path, request and answer messages, and the
 * slot each has in a dispatch table), the PS mode rule, the optimizers a
 * sparse table accepts.
 *
 * pserver/server.c dispatches through a handler table indexed by
 * fl_proto_id, trainer/ps_client.c calls methods by their fl_proto_id, and
 * tests/fuzz/fuzz_ps_core.c feeds every method's request type from the same
 * table.  tests/unit/test_wire_service.c checks the table against the
 * service blocks of proto/flotilla.proto and proto/health.proto, and that
 * flotilla-pserver has a handler in every slot.
 *
 * Adding an RPC: the message and `rpc` line in proto/flotilla.proto, one
 * X(...) line below, its handler in pserver/ (server.c's table, and the rule
 * in the core if it has one), and the client call if the trainer makes it;
 * docs/PROTOCOL.md says what it means.  See docs/ARCHITECTURE.md. */
#ifndef FL_PROTOCOL_H
#define FL_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_optim.h"
#include "fl_rpc.h"
#include "flotilla.pb-c.h"
#include "health.pb-c.h"

/* The most trainers in one job is FL_CLUSTER_MAX_TRAINERS (fl_cluster.h),
 * for the cluster description, the collective engine and the pserver. */

#define FL_PROTO_SERVICE "flotilla.ParameterServer"

/* X(ID, service, Method, request type, answer type, flags): the methods of
 * the wire, in slot order.  Types are protobuf-c's lower-case prefixes. */
#define FL_PROTO_METHODS(X)                                                                      \
  X(REGISTER, "flotilla.ParameterServer", "Register", flotilla__register_request,                \
    flotilla__register_response, 0)                                                              \
  X(PUSH_DENSE, "flotilla.ParameterServer", "PushDense", flotilla__push_dense_request,           \
    flotilla__push_dense_response, 0)                                                            \
  X(PULL_DENSE, "flotilla.ParameterServer", "PullDense", flotilla__pull_dense_request,           \
    flotilla__pull_dense_response, 0)                                                            \
  X(PULL_SPARSE, "flotilla.ParameterServer", "PullSparse", flotilla__pull_sparse_request,        \
    flotilla__pull_sparse_response, 0)                                                           \
  X(PUSH_SPARSE, "flotilla.ParameterServer", "PushSparse", flotilla__push_sparse_request,        \
    flotilla__push_sparse_response, 0)                                                           \
  X(BARRIER, "flotilla.ParameterServer", "Barrier", flotilla__barrier_request,                   \
    flotilla__barrier_response, 0)                                                               \
  X(HEARTBEAT, "flotilla.ParameterServer", "Heartbeat", flotilla__heartbeat_request,             \
    flotilla__heartbeat_response, 0)                                                             \
  X(SAVE_CHECKPOINT, "flotilla.ParameterServer", "SaveCheckpoint",                               \
    flotilla__save_checkpoint_request, flotilla__save_checkpoint_response, 0)                    \
  X(LOAD_CHECKPOINT, "flotilla.ParameterServer", "LoadCheckpoint",                               \
    flotilla__load_checkpoint_request, flotilla__load_checkpoint_response, 0)                    \
  X(COMPLETE, "flotilla.ParameterServer", "Complete", flotilla__complete_request,                \
    flotilla__complete_response, 0)                                                              \
  X(STATS, "flotilla.ParameterServer", "Stats", flotilla__stats_request,                         \
    flotilla__stats_response, 0)                                                                 \
  X(INIT_SPARSE, "flotilla.ParameterServer", "InitSparse", flotilla__init_sparse_request,        \
    flotilla__init_sparse_response, 0)                                                           \
  X(DUMP_SPARSE, "flotilla.ParameterServer", "DumpSparse", flotilla__dump_sparse_request,        \
    flotilla__dump_sparse_response, 0)                                                           \
  X(PULL_SPARSE_BATCH, "flotilla.ParameterServer", "PullSparseBatch",                            \
    flotilla__pull_sparse_batch_request, flotilla__pull_sparse_batch_response, 0)                \
  X(PUSH_SPARSE_BATCH, "flotilla.ParameterServer", "PushSparseBatch",                            \
    flotilla__push_sparse_batch_request, flotilla__push_sparse_batch_response, 0)                \
  X(HEALTH_CHECK, "grpc.health.v1.Health", "Check", grpc__health__v1__health_check_request,      \
    grpc__health__v1__health_check_response, FL_PROTO_NO_TOKEN)

/* Flags of a method. */
#define FL_PROTO_NO_TOKEN 1u /* answered without the shared token (health) */

typedef enum fl_proto_id {
#define FL_PROTO_ENUM_(id, svc, name, req, resp, flags) FL_PROTO_##id,
  FL_PROTO_METHODS(FL_PROTO_ENUM_)
#undef FL_PROTO_ENUM_
  FL_PROTO_COUNT
} fl_proto_id;

/* One method: its path and types (fl_rpc_method), its bare name
 * ("PushDense", for logs and counters) and flags. */
typedef struct fl_proto_method {
  fl_rpc_method rpc;
  const char *name;
  unsigned flags;
} fl_proto_method;

/* Indexed by fl_proto_id. */
extern const fl_proto_method fl_proto_methods[FL_PROTO_COUNT];

/* The method whose path is the `len` bytes at `path`, or -1. */
int fl_proto_find(const char *path, size_t len);

/* The PS mode of a job (strategy.a_sync, a_sync_configs.k_steps): sync when
 * a_sync is false, geo when it is true with k_steps > 0, else async. */
Flotilla__SyncMode fl_proto_mode(int a_sync, int64_t k_steps);
/* "sync", "async", "geo" ("?" for anything else). */
const char *fl_proto_mode_name(int mode);

/* Optimizers a sparse table accepts (the rule for rows updated one by one). */
int fl_proto_sparse_optim_ok(fl_optim_kind k);
#define FL_PROTO_SPARSE_OPTIMS "sgd, adagrad, adam, rowwise_adagrad or ftrl"

#endif
