/* ps_layout.c - dense block split and placement, sparse key sharding
 * (see fl_ps_layout.h for the rules both sides rely on). */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_ps_layout.h"

fl_status fl_ps_layout_build(const uint64_t *numel, size_t n_params, uint64_t block_size,
                             int n_servers, fl_ps_layout **out) {
  fl_ps_layout *l = NULL;
  size_t nb = 0, b = 0;

  *out = NULL;
  if (!numel || n_params == 0 || block_size == 0 || n_servers < 1)
    return FL_ERR(FL_EINVAL, "ps layout: %zu params, block size %llu, %d servers: bad argument",
                  n_params, (unsigned long long)block_size, n_servers);
  for (size_t p = 0; p < n_params; p++) {
    if (numel[p] == 0) return FL_ERR(FL_EINVAL, "ps layout: parameter %zu has no elements", p);
    nb += (size_t)((numel[p] + block_size - 1) / block_size);
    if (nb > FL_PS_MAX_BLOCKS)
      return FL_ERR(FL_EINVAL, "ps layout: more than %u blocks (block size %llu too small)",
                    FL_PS_MAX_BLOCKS, (unsigned long long)block_size);
  }
  l = calloc(1, sizeof *l);
  if (!l) goto nomem;
  l->n_params = n_params;
  l->n_blocks = nb;
  l->n_servers = n_servers;
  l->block_size = block_size;
  l->blocks = calloc(nb, sizeof *l->blocks);
  l->first_block = calloc(n_params + 1, sizeof *l->first_block);
  l->numel = malloc(n_params * sizeof *l->numel);
  l->server_load = calloc((size_t)n_servers, sizeof *l->server_load);
  if (!l->blocks || !l->first_block || !l->numel || !l->server_load) goto nomem;
  memcpy(l->numel, numel, n_params * sizeof *numel);
  for (size_t p = 0; p < n_params; p++) {
    l->first_block[p] = b;
    for (uint64_t off = 0; off < numel[p]; off += block_size) {
      fl_ps_block *blk = &l->blocks[b++];
      int best = 0;
      blk->param = (uint32_t)p;
      blk->offset = off;
      blk->n = numel[p] - off < block_size ? numel[p] - off : block_size;
      for (int s = 1; s < n_servers; s++)
        if (l->server_load[s] < l->server_load[best]) best = s;
      blk->server = best;
      l->server_load[best] += blk->n;
    }
  }
  l->first_block[n_params] = b;
  *out = l;
  return FL_OK;
nomem:
  fl_ps_layout_free(l);
  return FL_ERR(FL_ENOMEM, "ps layout: out of memory for %zu blocks", nb);
}

void fl_ps_layout_free(fl_ps_layout *l) {
  if (!l) return;
  free(l->blocks);
  free(l->first_block);
  free(l->numel);
  free(l->server_load);
  free(l);
}

int fl_ps_layout_equal(const fl_ps_layout *a, const fl_ps_layout *b) {
  return a && b && a->n_params == b->n_params && a->block_size == b->block_size &&
         a->n_servers == b->n_servers &&
         memcmp(a->numel, b->numel, a->n_params * sizeof *a->numel) == 0;
}

int fl_ps_key_server(uint64_t key, int n_servers) {
  /* Multiply-shift of the high half: uniform over [0, n) without a modulo. */
  uint64_t h = fl_ps_mix64(key) >> 32;
  return (int)((h * (uint64_t)n_servers) >> 32);
}
