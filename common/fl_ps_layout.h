/* fl_ps_layout.h - where PServer mode keeps each parameter.
 *
 * Dense parameters are cut into blocks of at most dense_block_size floats
 * (a parameter smaller than that is one block; a larger one is cut into
 * full blocks and one shorter last block), numbered in parameter order.
 * The blocks are then spread over the servers greedily: each block, in
 * order, goes to the server holding the fewest floats so far (the lowest
 * index on a tie).  The trainer and every pserver compute this from the
 * same inputs (parameter sizes in forward order, block size, server count),
 * so they agree on the placement without sending it around.
 *
 * Sparse rows are sharded by a hash of their 64-bit key: the server of key
 * k is fl_ps_key_server(k, n_servers), the same on every process.
 *
 * Both trainer/ and pserver/ use this, so it lives in common/. */
#ifndef FL_PS_LAYOUT_H
#define FL_PS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

/* One dense block: elements [offset, offset+n) of parameter `param`. */
typedef struct fl_ps_block {
  uint32_t param;
  uint64_t offset;
  uint64_t n;
  int server;
} fl_ps_block;

typedef struct fl_ps_layout {
  size_t n_params;
  size_t n_blocks;
  int n_servers;
  uint64_t block_size;
  fl_ps_block *blocks;   /* n_blocks, in parameter order */
  size_t *first_block;   /* n_params + 1: blocks of param p are
                            [first_block[p], first_block[p+1]) */
  uint64_t *numel;       /* n_params: the sizes it was built from */
  uint64_t *server_load; /* n_servers: floats placed on each server */
} fl_ps_layout;

/* Most blocks a layout may have (the wire carries block ids as uint32). */
#define FL_PS_MAX_BLOCKS (1u << 24)

/* Build the layout of n_params parameters of numel[i] floats each (every
 * numel >= 1) over n_servers (>= 1) servers with blocks of at most
 * block_size (>= 1) floats.  FL_EINVAL (logged) for a bad argument or more
 * than FL_PS_MAX_BLOCKS blocks.  The caller owns *out (fl_ps_layout_free). */
fl_status fl_ps_layout_build(const uint64_t *numel, size_t n_params, uint64_t block_size,
                             int n_servers, fl_ps_layout **out);
void fl_ps_layout_free(fl_ps_layout *l);

/* 1 when a and b were built from the same inputs (same placement). */
int fl_ps_layout_equal(const fl_ps_layout *a, const fl_ps_layout *b);

/* The server of sparse key `key` among n_servers (>= 1). */
int fl_ps_key_server(uint64_t key, int n_servers);

/* A 64-bit mix of x (splitmix64's finalizer): the hash behind the sharding,
 * also used by the tables. */
static inline uint64_t fl_ps_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

#endif
