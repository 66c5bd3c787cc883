/* fl_rpc.h - thin helpers over the gRPC C core (libgrpc 1.51) shared by the
 * PS client and flotilla-pserver.
 *
 * What it covers, and why it is here rather than in each daemon:
 *   - channel and server creation with the same options on both sides: the
 *     message size limits (gRPC's 4 MiB default receive limit is far below a
 *     dense block), fast reconnect backoff (a restarted pserver is found
 *     again within a second), no SO_REUSEPORT (two servers can never share
 *     a port by accident), insecure or TLS credentials;
 *   - the shared token: the client sends it in the metadata key
 *     FL_RPC_TOKEN_KEY, the server compares it in constant time;
 *   - deadlines and the gRPC status <-> fl_status conversion;
 *   - messages: protobuf-c packing into a gRPC byte buffer whose large
 *     `bytes` fields can be referenced instead of copied (a dense push sends
 *     the model's gradient memory as it is), a reusable contiguous receive
 *     buffer, and an arena allocator for unpacking so that hot paths reuse
 *     warm memory instead of faulting in fresh pages;
 *   - one client unary call on a completion queue (the caller drives the
 *     queue, so several calls can be in flight), and a blocking variant.
 *
 * Generic (non-registered) calls are used everywhere: the method is the
 * path "/flotilla.ParameterServer/PushDense" and so on.
 * Threading: everything here may be used from any thread; one fl_rpc_call,
 * fl_rpc_outbuf, fl_rpc_inbuf or fl_rpc_arena by one thread at a time. */
#ifndef FL_RPC_H
#define FL_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

#include "fl_status.h"

/* One unary method of a dispatch table: its path ("/package.Service/Rpc")
 * and the protobuf-c descriptors of its request and answer.  The tables of
 * flotilla-pserver and of the trainer's client are checked against the
 * service blocks of proto/ by tests/unit/test_wire_service.c. */
typedef struct fl_rpc_method {
  const char *path;
  const ProtobufCMessageDescriptor *req;
  const ProtobufCMessageDescriptor *resp;
} fl_rpc_method;

/* Metadata key of the shared token (lower case, as HTTP/2 requires). */
#define FL_RPC_TOKEN_KEY "x-flotilla-token"

/* Default message size limit of both directions (grpc.max_*_message_length). */
#define FL_RPC_DEFAULT_MAX_MESSAGE (256u << 20)

typedef struct fl_rpc_opts {
  size_t max_message_bytes; /* 0 = FL_RPC_DEFAULT_MAX_MESSAGE; at most INT_MAX */
  const char *token;        /* NULL or "" = no token */
  /* TLS (PEM file paths).  Server: cert+key, ca to verify clients when
   * tls_mutual.  Client: ca to verify the server, cert+key when mutual.
   * All NULL/"" = insecure. */
  const char *tls_cert;
  const char *tls_key;
  const char *tls_ca;
  int tls_mutual;
  /* Client: the least time a connection attempt is given (TCP and the
   * HTTP/2 handshake; gRPC's min connect timeout).  0 = 100 ms, for a
   * restarted pserver found again at once; a server in another process
   * that may answer slowly under load (etcd) wants seconds. */
  int connect_timeout_ms;
} fl_rpc_opts;

/* grpc_init / grpc_shutdown (reference counted by gRPC).  Never call
 * fl_rpc_init in a process that will fork() afterwards. */
void fl_rpc_init(void);
void fl_rpc_shutdown(void);

/* Status conversion at the boundary. */
fl_status fl_rpc_status_from_grpc(grpc_status_code code);
grpc_status_code fl_rpc_status_to_grpc(fl_status st);
/* "OK", "INVALID_ARGUMENT", ...; never NULL. */
const char *fl_rpc_code_name(grpc_status_code code);

/* An absolute deadline `seconds` from now (monotonic clock). */
gpr_timespec fl_rpc_deadline(double seconds);

/* A channel to target ("host:port") with o's limits, backoff and
 * credentials.  FL_EIO (logged) when a TLS file cannot be read.  The caller
 * owns *out (grpc_channel_destroy). */
fl_status fl_rpc_channel_create(const char *target, const fl_rpc_opts *o, grpc_channel **out);

/* A server with o's limits (not started, no port yet).  The caller owns
 * *out (grpc_server_destroy after shutdown). */
fl_status fl_rpc_server_create(const fl_rpc_opts *o, grpc_server **out);

/* Bind addr ("host:port"; port 0 picks one) with o's credentials.  *port
 * gets the bound port.  FL_EIO (logged, naming addr) when it cannot bind. */
fl_status fl_rpc_server_bind(grpc_server *srv, const char *addr, const fl_rpc_opts *o, int *port);

/* 1 when md holds FL_RPC_TOKEN_KEY equal to token (constant-time compare),
 * or when token is NULL/"" (no token configured); else 0. */
int fl_rpc_token_ok(const grpc_metadata_array *md, const char *token);

/* ----------------------------------------------------------------- buffers */

/* Serializer: a ProtobufCBuffer that keeps small appends in its own
 * (reused, reference-counted) storage and, when zero_copy_min > 0, keeps
 * appends of at least that many bytes as references to the caller's memory.
 * That memory must stay valid and unchanged until the call using the byte
 * buffer has completed. */
typedef struct fl_rpc_outbuf fl_rpc_outbuf;

/* A new serializer; the caller owns *out (fl_rpc_outbuf_free). */
fl_status fl_rpc_outbuf_create(size_t zero_copy_min, fl_rpc_outbuf **out);
void fl_rpc_outbuf_free(fl_rpc_outbuf *ob);

/* Pack msg into a new byte buffer (caller owns it; sending it through a
 * batch and destroying it afterwards is the usual use).  The outbuf may be
 * reused for the next message at once: storage still referenced by an
 * earlier byte buffer is left to it and fresh storage is taken. */
fl_status fl_rpc_pack(fl_rpc_outbuf *ob, const ProtobufCMessage *msg, grpc_byte_buffer **out);

/* Bytes of the last message packed. */
size_t fl_rpc_outbuf_len(const fl_rpc_outbuf *ob);

/* Receive buffer: contiguous, grown on demand, reused. */
typedef struct fl_rpc_inbuf {
  uint8_t *data;
  size_t len;
  size_t cap;
} fl_rpc_inbuf;

/* Copy the message of bb into ib (replacing its contents).  FL_EPROTO
 * (not logged) when bb cannot be read, FL_ENOMEM when it cannot grow. */
fl_status fl_rpc_inbuf_read(fl_rpc_inbuf *ib, grpc_byte_buffer *bb);
void fl_rpc_inbuf_free(fl_rpc_inbuf *ib);

/* Arena for protobuf-c unpacking: bump allocation, 16-byte aligned, freed
 * all at once by fl_rpc_arena_reset (the chunk is kept and grown to fit the
 * largest use seen). */
typedef struct fl_rpc_arena {
  ProtobufCAllocator allocator; /* pass &arena->allocator to unpack */
  uint8_t *base;
  size_t used;
  size_t cap;
  size_t want;        /* bytes the last cycle needed in total */
  void **overflow;    /* allocations that did not fit in base */
  size_t n_overflow;
  size_t cap_overflow;
} fl_rpc_arena;

void fl_rpc_arena_init(fl_rpc_arena *a);
void fl_rpc_arena_reset(fl_rpc_arena *a);
void fl_rpc_arena_free(fl_rpc_arena *a);

/* Unpack len bytes as desc's message into the arena; NULL when the bytes
 * are not a valid message (malformed input, not logged). */
ProtobufCMessage *fl_rpc_unpack(fl_rpc_arena *a, const ProtobufCMessageDescriptor *desc,
                                const uint8_t *data, size_t len);

/* -------------------------------------------------------- client unary call */

typedef struct fl_rpc_call {
  grpc_call *call;
  grpc_metadata md;      /* the token, when there is one */
  grpc_metadata_array initial_md;
  grpc_metadata_array trailing_md;
  grpc_byte_buffer *send;
  grpc_byte_buffer *recv; /* the response message; NULL when none came */
  grpc_status_code status;
  grpc_slice details;
  int active;
} fl_rpc_call;

/* Start method on ch: send req (taken over: destroyed by fl_rpc_call_end),
 * receive one message and the status.  Completion is reported on cq with
 * tag (the event's success flag is always 1; look at c->status).  On
 * failure nothing is posted to cq and the call is already ended. */
fl_status fl_rpc_call_start(fl_rpc_call *c, grpc_channel *ch, grpc_completion_queue *cq,
                            const char *method, grpc_byte_buffer *req, double timeout_s,
                            const char *token, void *tag);

/* The details string of a completed call into buf (NUL-terminated). */
void fl_rpc_call_details(const fl_rpc_call *c, char *buf, size_t cap);

/* Release everything of a completed (or never started) call.  Idempotent. */
void fl_rpc_call_end(fl_rpc_call *c);

/* Blocking unary call: pack req, call method with a deadline of timeout_s,
 * copy the answer into ib.  *code gets the gRPC status (GRPC_STATUS_OK when
 * the call went through), details (cap bytes, may be NULL) its details.
 * Returns FL_OK when the call completed with OK, else the converted status;
 * nothing is logged (callers know the peer and decide about retrying). */
fl_status fl_rpc_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                       double timeout_s, const char *token, fl_rpc_outbuf *ob, fl_rpc_inbuf *ib,
                       grpc_status_code *code, char *details, size_t cap);

#endif
