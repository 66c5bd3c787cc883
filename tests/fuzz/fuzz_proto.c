/* fuzz_proto.c - every message of proto/flotilla.proto (requests the
 * pserver unpacks, responses the PS client unpacks) through the wire
 * helpers of common/rpc.c: unpack into an fl_rpc_arena (what the service
 * does) and with protobuf-c's own allocator, pack with fl_rpc_pack (copied
 * or zero-copy segments into a gRPC byte buffer), read back with
 * fl_rpc_inbuf_read.
 *
 * Input: byte 0 picks the message type, byte 1 the outbuf's zero-copy
 * threshold (0 = copy everything, else 1..255 bytes), the rest is the
 * serialized message; with byte 1 odd the arena is reused across two
 * unpacks (as a server thread reuses it call after call).
 * Invariants: the arena and the default allocator accept the same inputs;
 * fl_rpc_pack produces exactly protobuf-c's own serialization (read back
 * through the byte buffer); unpacking that again and packing gives the
 * same bytes (the canonical form is a fixed point).  Known finding: with
 * 0 < zero_copy_min <= 8 or so, fl_rpc_pack references protobuf-c's
 * on-stack scratch (tags, lengths) and the output is corrupt; see the
 * corpus file zero_copy_min_2_corrupts_pack. */
#include <config.h>

#include <string.h>

#include "fl_rpc.h"
#include "flotilla.pb-c.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (256 * 1024)

static const ProtobufCMessageDescriptor *const k_msgs[] = {
    &flotilla__tensor__descriptor,
    &flotilla__dense_param_spec__descriptor,
    &flotilla__sparse_table_spec__descriptor,
    &flotilla__register_request__descriptor,
    &flotilla__register_response__descriptor,
    &flotilla__dense_block__descriptor,
    &flotilla__push_dense_request__descriptor,
    &flotilla__push_dense_response__descriptor,
    &flotilla__pull_dense_request__descriptor,
    &flotilla__pull_dense_response__descriptor,
    &flotilla__pull_sparse_request__descriptor,
    &flotilla__pull_sparse_response__descriptor,
    &flotilla__push_sparse_request__descriptor,
    &flotilla__push_sparse_response__descriptor,
    &flotilla__barrier_request__descriptor,
    &flotilla__barrier_response__descriptor,
    &flotilla__heartbeat_request__descriptor,
    &flotilla__heartbeat_response__descriptor,
    &flotilla__save_checkpoint_request__descriptor,
    &flotilla__save_checkpoint_response__descriptor,
    &flotilla__load_checkpoint_request__descriptor,
    &flotilla__load_checkpoint_response__descriptor,
    &flotilla__complete_request__descriptor,
    &flotilla__complete_response__descriptor,
    &flotilla__stats_request__descriptor,
    &flotilla__stats_response__descriptor,
};
#define N_MSGS (sizeof k_msgs / sizeof k_msgs[0])

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

/* msg packed by fl_rpc_pack and read back into ib. */
static void rpc_pack(fl_rpc_outbuf *ob, const ProtobufCMessage *msg, fl_rpc_inbuf *ib) {
  grpc_byte_buffer *bb = NULL;
  FUZZ_CHECK(fl_rpc_pack(ob, msg, &bb) == FL_OK, "fl_rpc_pack of a %s", msg->descriptor->name);
  FUZZ_CHECK(fl_rpc_inbuf_read(ib, bb) == FL_OK, "fl_rpc_inbuf_read");
  FUZZ_CHECK(fl_rpc_outbuf_len(ob) == ib->len, "outbuf says %zu bytes, buffer holds %zu",
             fl_rpc_outbuf_len(ob), ib->len);
  grpc_byte_buffer_destroy(bb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fl_rpc_arena arena;
  fl_rpc_outbuf *ob = NULL;
  fl_rpc_inbuf ib = {0}, ib2 = {0};

  if (size < 2 || size > FUZZ_MAX_INPUT) return 0;
  const ProtobufCMessageDescriptor *d = k_msgs[data[0] % N_MSGS];
  size_t zc = data[1] >> 1;
  const uint8_t *body = data + 2;
  size_t len = size - 2;

  fl_rpc_arena_init(&arena);
  if (data[1] & 1) {
    /* a previous call's message in the same arena, then reset */
    ProtobufCMessage *prev = fl_rpc_unpack(&arena, d, body, len / 2);
    (void)prev;
    fl_rpc_arena_reset(&arena);
  }
  ProtobufCMessage *a = fl_rpc_unpack(&arena, d, body, len);
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, body);
  FUZZ_CHECK(!a == !m, "%s: arena %s, default allocator %s", d->name, a ? "accepts" : "refuses",
             m ? "accepts" : "refuses");
  if (!m) {
    fl_rpc_arena_free(&arena);
    return 0;
  }

  FUZZ_CHECK(fl_rpc_outbuf_create(zc, &ob) == FL_OK, "outbuf");
  size_t want = protobuf_c_message_get_packed_size(m);
  uint8_t *plain = malloc(want ? want : 1);
  FUZZ_CHECK(plain != NULL, "malloc");
  FUZZ_CHECK(protobuf_c_message_pack(m, plain) == want, "pack size");

  rpc_pack(ob, a, &ib);
  FUZZ_CHECK(ib.len == want && !memcmp(ib.data, plain, want),
             "%s: fl_rpc_pack differs from protobuf-c's serialization (%zu vs %zu bytes)",
             d->name, ib.len, want);
  /* pack the default-allocator copy with the same outbuf (reused) */
  rpc_pack(ob, m, &ib2);
  FUZZ_CHECK(ib2.len == want && !memcmp(ib2.data, plain, want), "%s: second pack differs",
             d->name);

  /* canonical form: unpack what was packed, pack again.  (protobuf-c keeps
   * unknown fields, even one numbered 0, and may then refuse its own
   * serialization of them; that is its business, not the wire helpers'.) */
  fl_rpc_arena_reset(&arena);
  ProtobufCMessage *again = fl_rpc_unpack(&arena, d, ib.data, ib.len);
  if (again) {
    rpc_pack(ob, again, &ib2);
    FUZZ_CHECK(ib2.len == want && !memcmp(ib2.data, plain, want), "%s: not a fixed point",
               d->name);
  }

  free(plain);
  protobuf_c_message_free_unpacked(m, NULL);
  fl_rpc_outbuf_free(ob);
  fl_rpc_inbuf_free(&ib);
  fl_rpc_inbuf_free(&ib2);
  fl_rpc_arena_free(&arena);
  return 0;
}
