/* hier.c - hierarchical allreduce (use_hierarchical_allreduce): shared
 * memory inside each node, a tcp ring among the node leaders.
 *
 * A node is the host of an endpoint; its leader is its lowest rank.
 * hierarchical_allreduce_inter_nranks, when not 0, must equal the number of
 * ranks on every node (Paddle's meaning: ranks per node), else the set-up
 * fails naming the node.
 *
 *   allreduce: shm reduce to the leader (fixed rank order), tcp ring
 *              allreduce among the leaders (fixed ring order), shm
 *              broadcast from the leader: every rank gets the leader's bytes.
 *   broadcast: shm on the root's node, tcp among leaders from the root's
 *              node, shm from the leader on every other node.
 *   allgather: shm allgather on each node, tcp allgather of the node blocks
 *              among leaders, leaders put blocks in rank order, shm
 *              broadcast of the whole result.
 *   barrier:   shm, tcp among leaders, shm. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"

typedef struct hier_state {
  fl_coll *c;
  int node, n_nodes;
  int is_leader;
  int max_local;
  int *node_ranks; /* n_nodes * max_local, -1 padded; ranks of node k in order */
  int *node_size;
  coll_group local, leaders;
  void *shm, *tcp;
  uint8_t *scratch;
  size_t cap;
} hier_state;

static fl_status hier_init(fl_coll *c, const coll_group *g, void **state) {
  *state = NULL;
  hier_state *h = calloc(1, sizeof(*h));
  if (!h) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  *state = h;
  h->c = c;
  h->n_nodes = c->n_nodes;
  h->node = c->peers[c->rank].node;
  h->node_size = calloc((size_t)h->n_nodes, sizeof(int));
  if (!h->node_size) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  for (int i = 0; i < g->n; i++) h->node_size[c->peers[g->ranks[i]].node]++;
  for (int k = 0; k < h->n_nodes; k++) {
    if (h->node_size[k] > h->max_local) h->max_local = h->node_size[k];
    if (c->ranks_per_node > 0 && h->node_size[k] != c->ranks_per_node) {
      const char *host = "?";
      for (int r = 0; r < c->world; r++)
        if (c->peers[r].node == k) {
          host = c->peers[r].host;
          break;
        }
      return FL_ERR(FL_EINVAL,
                    "collective: hierarchical_allreduce_inter_nranks is %d but node %s has %d "
                    "rank%s",
                    c->ranks_per_node, host, h->node_size[k], h->node_size[k] == 1 ? "" : "s");
    }
  }
  h->node_ranks = malloc((size_t)h->n_nodes * (size_t)h->max_local * sizeof(int));
  h->local.ranks = malloc((size_t)h->max_local * sizeof(int));
  h->leaders.ranks = malloc((size_t)h->n_nodes * sizeof(int));
  if (!h->node_ranks || !h->local.ranks || !h->leaders.ranks)
    return FL_ERR(FL_ENOMEM, "collective: out of memory");
  for (int i = 0; i < h->n_nodes * h->max_local; i++) h->node_ranks[i] = -1;
  int *fill = calloc((size_t)h->n_nodes, sizeof(int));
  if (!fill) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  for (int i = 0; i < g->n; i++) {
    int r = g->ranks[i], k = c->peers[r].node;
    h->node_ranks[k * h->max_local + fill[k]++] = r;
  }
  free(fill);
  h->local.n = h->node_size[h->node];
  h->local.tag = 2;
  for (int j = 0; j < h->local.n; j++) {
    h->local.ranks[j] = h->node_ranks[h->node * h->max_local + j];
    if (h->local.ranks[j] == c->rank) h->local.me = j;
  }
  h->leaders.n = h->n_nodes;
  h->leaders.me = h->node;
  h->leaders.tag = 3;
  for (int k = 0; k < h->n_nodes; k++) h->leaders.ranks[k] = h->node_ranks[k * h->max_local];
  h->is_leader = h->local.me == 0;
  fl_status st = fl_coll_shm_backend.init(c, &h->local, &h->shm);
  if (st != FL_OK) return st;
  if (h->is_leader && h->n_nodes > 1) st = fl_coll_tcp_backend.init(c, &h->leaders, &h->tcp);
  return st;
}

static int local_index(hier_state *h, int node, int rank) {
  for (int j = 0; j < h->node_size[node]; j++)
    if (h->node_ranks[node * h->max_local + j] == rank) return j;
  return 0;
}

static fl_status hier_allreduce(void *vs, void *buf, size_t count, fl_coll_dtype dt) {
  hier_state *h = vs;
  if (count == 0) return FL_OK;
  FL_TRY(fl_coll_shm_backend.reduce(h->shm, buf, count, dt, 0));
  if (h->is_leader && h->tcp) FL_TRY(fl_coll_tcp_backend.allreduce(h->tcp, buf, count, dt));
  return fl_coll_shm_backend.broadcast(h->shm, buf, count * fl_coll_dtype_size(dt), 0);
}

static fl_status hier_broadcast(void *vs, void *buf, size_t bytes, int root) {
  hier_state *h = vs;
  if (bytes == 0) return FL_OK;
  int rnode = h->c->peers[root].node;
  if (h->node == rnode)
    FL_TRY(fl_coll_shm_backend.broadcast(h->shm, buf, bytes, local_index(h, rnode, root)));
  if (h->is_leader && h->tcp) FL_TRY(fl_coll_tcp_backend.broadcast(h->tcp, buf, bytes, rnode));
  if (h->node != rnode) FL_TRY(fl_coll_shm_backend.broadcast(h->shm, buf, bytes, 0));
  return FL_OK;
}

static fl_status hier_allgather(void *vs, const void *send, size_t bytes, void *vrecv) {
  hier_state *h = vs;
  uint8_t *recv = vrecv;
  if (bytes == 0) return FL_OK;
  size_t ml = (size_t)h->max_local, nn = (size_t)h->n_nodes;
  size_t need = (nn + 1) * ml * bytes;
  if (need > h->cap) {
    uint8_t *p = realloc(h->scratch, need);
    if (!p) return FL_ERR(FL_ENOMEM, "collective: out of memory for allgather (%zu bytes)", need);
    h->scratch = p;
    h->cap = need;
  }
  /* scratch: [node blocks of all nodes: nn * ml * bytes][local block: ml * bytes] */
  uint8_t *local = h->scratch + nn * ml * bytes;
  FL_TRY(fl_coll_shm_backend.allgather(h->shm, send, bytes, local));
  if (h->is_leader) {
    uint8_t *mine = h->scratch + (size_t)h->node * ml * bytes;
    memcpy(mine, local, (size_t)h->node_size[h->node] * bytes);
    if (h->tcp) FL_TRY(fl_coll_tcp_backend.allgather(h->tcp, mine, ml * bytes, h->scratch));
    for (int k = 0; k < h->n_nodes; k++)
      for (int j = 0; j < h->node_size[k]; j++) {
        int r = h->node_ranks[(size_t)k * ml + (size_t)j];
        memcpy(recv + (size_t)r * bytes, h->scratch + ((size_t)k * ml + (size_t)j) * bytes, bytes);
      }
  }
  return fl_coll_shm_backend.broadcast(h->shm, recv, (size_t)h->c->world * bytes, 0);
}

static fl_status hier_barrier(void *vs) {
  hier_state *h = vs;
  FL_TRY(fl_coll_shm_backend.barrier(h->shm));
  if (h->is_leader && h->tcp) FL_TRY(fl_coll_tcp_backend.barrier(h->tcp));
  return fl_coll_shm_backend.barrier(h->shm);
}

static fl_status hier_set_algorithm(void *vs, int algo) {
  hier_state *h = vs;
  return h->tcp ? fl_coll_tcp_backend.set_algorithm(h->tcp, algo) : FL_OK;
}

static const coll_tuning *hier_tuning(void *vs) {
  hier_state *h = vs;
  return h->tcp ? fl_coll_tcp_backend.tuning(h->tcp) : NULL;
}

static void hier_abort(void *vs) {
  hier_state *h = vs;
  if (h->shm) fl_coll_shm_backend.abort(h->shm);
  if (h->tcp) fl_coll_tcp_backend.abort(h->tcp);
}

static void hier_destroy(void *vs) {
  hier_state *h = vs;
  if (!h) return;
  if (h->shm) fl_coll_shm_backend.destroy(h->shm);
  if (h->tcp) fl_coll_tcp_backend.destroy(h->tcp);
  free(h->scratch);
  free(h->node_ranks);
  free(h->node_size);
  free(h->local.ranks);
  free(h->leaders.ranks);
  free(h);
}

const coll_backend fl_coll_hier_backend = {
    "hier(shm+tcp)", hier_init,  hier_allreduce, hier_broadcast, hier_allgather,
    hier_barrier,    hier_abort, hier_destroy, NULL, hier_set_algorithm, hier_tuning};
