/* fuzz_rendezvous.c - the collective engine's connection hello (the payload
 * of MSG_REGISTER and MSG_DATA_HELLO, the first frame any peer sends, so
 * the first bytes an unauthenticated stranger controls) and the token
 * comparison that judges it.
 *
 * Input: a hello payload; its last byte also splits a presented token
 * from an expected one for the comparison.
 * Invariants: coll_hello_decode accepts exactly the payloads whose lengths
 * add up, with host and token inside their buffers (host NUL-terminated);
 * a decoded hello whose host holds no NUL encodes back to the same bytes;
 * coll_token_equal agrees with memcmp. */
#include <config.h>

#include <string.h>

#include "coll_internal.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT 4096

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  coll_hello h;
  uint8_t again[FUZZ_MAX_INPUT];

  if (size > FUZZ_MAX_INPUT) return 0;
  fl_status st = coll_hello_decode(data, size, &h);
  if (st == FL_OK) {
    FUZZ_CHECK(size >= 38, "accepted %zu bytes", size);
    size_t hl = fuzz_u16(data + 34), tl = fuzz_u16(data + 36);
    FUZZ_CHECK(hl < FL_HOST_MAX && tl < FL_TOKEN_MAX && 38 + hl + tl == size,
               "host %zu + token %zu bytes in %zu", hl, tl, size);
    FUZZ_CHECK(h.host[hl] == '\0' && h.token_len == tl, "host/token");
    FUZZ_CHECK(!memcmp(h.token, data + 38 + hl, tl), "token bytes");
    if (!memchr(data + 38, '\0', hl)) {
      size_t n = coll_hello_encode(&h, again, sizeof again);
      FUZZ_CHECK(n == size && !memcmp(again, data, size), "encode(decode(x)) != x (%zu bytes)", n);
    }
  } else {
    FUZZ_CHECK(st == FL_EPROTO, "status %d", (int)st);
  }

  /* Token comparison: expected = first k bytes, presented = the rest. */
  if (size >= 1) {
    size_t k = data[size - 1] % size;
    const char *e = (const char *)data, *g = (const char *)data + k;
    size_t elen = k, glen = size - 1 - k;
    int want = elen == glen && !memcmp(e, g, elen);
    FUZZ_CHECK(coll_token_equal(e, elen, g, glen) == want, "token_equal(%zu, %zu)", elen, glen);
  }
  return 0;
}
