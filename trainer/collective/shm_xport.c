/* shm_xport.c - the shared-memory transport: byte streams between the
 * ranks of one host through rings in shared memory, so that algo.c's
 * algorithms (ring, halving-doubling, double binary tree) run over shared
 * memory exactly as they run over tcp: the same schedule, the same order
 * of the sum, the same bits.  The shm backend (shm.c) places the rings in
 * its segment when the job fixes one of those algorithms; its own direct
 * reduce stays the choice otherwise (on one host it moves the fewest
 * bytes).
 *
 * Layout of the region (64-byte aligned, zeroed by ftruncate):
 *   per member: a bell word and a count of sleepers, a cache line each;
 *   a shared abort word;
 *   per ordered pair (i -> j) that some algorithm uses (coll_algo_peers)
 *   and per channel: head (bytes taken, written by j), tail (bytes put,
 *   written by i), each on a cache line of its own, then RING bytes.
 * Every member computes the same pair numbering from (n, nch), so no
 * table travels.  A send or a receive that moves bytes rings the peer's
 * bell (an increment, and a futex wake when the peer sleeps); a wait that
 * found nothing ready sleeps on its own bell with the value it read before
 * looking, so a ring between the look and the sleep is never lost. */
#include <config.h>

#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll_internal.h"

#define LINE 64
#define RING ((size_t)256 << 10) /* bytes of one ring */

typedef struct ring_hdr {
  atomic_uint_fast64_t head;
  char pad0[LINE - sizeof(atomic_uint_fast64_t)];
  atomic_uint_fast64_t tail;
  char pad1[LINE - sizeof(atomic_uint_fast64_t)];
} ring_hdr;

typedef struct bell {
  atomic_uint word;
  char pad0[LINE - sizeof(atomic_uint)];
  atomic_uint sleepers;
  char pad1[LINE - sizeof(atomic_uint)];
} bell;

struct coll_shm_rings {
  fl_coll *c;
  int n, me, nch;
  const int *ranks;
  bell *bells;          /* n */
  atomic_uint *abort;   /* shared */
  uint8_t *rings;       /* npairs * nch rings of sizeof(ring_hdr) + RING bytes */
  int *pair;            /* n * n: ring-pair number of i -> j, or -1 */
  atomic_int dead;      /* this rank saw the communicator fail */
  coll_xport x;
};

/* ------------------------------------------------------------ layout */

/* The ordered pairs some algorithm uses, numbered in (i, then j) order;
 * pair (when not NULL, n * n entries) gets each one's number or -1.
 * Returns their count, or -1 out of memory. */
static int number_pairs(int n, int *pair) {
  int *peers = malloc((size_t)n * sizeof(int)), count = 0;
  char *use = calloc((size_t)n * (size_t)n, 1);
  if (!peers || !use) {
    free(peers);
    free(use);
    return -1;
  }
  for (int i = 0; i < n && count >= 0; i++) {
    int k = coll_algo_peers(n, i, peers);
    if (k < 0) count = -1;
    for (int q = 0; q < k; q++) use[(size_t)i * (size_t)n + (size_t)peers[q]] = 1;
  }
  for (size_t ij = 0; count >= 0 && ij < (size_t)n * (size_t)n; ij++) {
    if (pair) pair[ij] = use[ij] ? count : -1;
    count += use[ij];
  }
  free(peers);
  free(use);
  return count;
}

static size_t ring_bytes(void) { return sizeof(ring_hdr) + RING; }

static size_t head_bytes(int n) { return (size_t)n * sizeof(bell) + LINE; }

size_t coll_shm_rings_size(int n, int nch) {
  int pairs = number_pairs(n, NULL);
  if (pairs < 0) return 0;
  return head_bytes(n) + (size_t)pairs * (size_t)nch * ring_bytes();
}

static ring_hdr *ring_of(const coll_shm_rings *r, int from, int to, int ch) {
  int p = r->pair[(size_t)from * (size_t)r->n + (size_t)to];
  return (ring_hdr *)(r->rings + ((size_t)p * (size_t)r->nch + (size_t)ch) * ring_bytes());
}

/* ------------------------------------------------------------ bells */

static void ring_bell(coll_shm_rings *r, int member) {
  bell *b = &r->bells[member];
  atomic_fetch_add_explicit(&b->word, 1, memory_order_release);
  if (atomic_load(&b->sleepers))
    syscall(SYS_futex, (unsigned *)&b->word, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

static fl_status dead_status(coll_shm_rings *r) {
  fl_status f = coll_failed(r->c);
  return f != FL_OK ? f : FL_ECLOSED;
}

static int is_dead(coll_shm_rings *r) {
  return atomic_load(&r->dead) || atomic_load(r->abort);
}

/* ------------------------------------------------------------ the transport */

static fl_status x_send(void *vs, int peer, int ch, const void *p, size_t len, size_t *moved) {
  coll_shm_rings *r = vs;
  *moved = 0;
  if (is_dead(r)) return dead_status(r);
  ring_hdr *h = ring_of(r, r->me, peer, ch);
  uint8_t *data = (uint8_t *)(h + 1);
  uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
  uint64_t tail = atomic_load_explicit(&h->tail, memory_order_relaxed);
  size_t room = RING - (size_t)(tail - head), k = len < room ? len : room;
  if (!k) return FL_OK;
  size_t at = (size_t)(tail % RING), first = k < RING - at ? k : RING - at;
  memcpy(data + at, p, first);
  memcpy(data, (const uint8_t *)p + first, k - first);
  atomic_store_explicit(&h->tail, tail + k, memory_order_release);
  ring_bell(r, peer);
  *moved = k;
  return FL_OK;
}

static fl_status x_recv(void *vs, int peer, int ch, void *p, size_t len, size_t *moved) {
  coll_shm_rings *r = vs;
  *moved = 0;
  if (is_dead(r)) return dead_status(r);
  ring_hdr *h = ring_of(r, peer, r->me, ch);
  const uint8_t *data = (const uint8_t *)(h + 1);
  uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
  uint64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
  size_t have = (size_t)(tail - head), k = len < have ? len : have;
  if (!k) return FL_OK;
  size_t at = (size_t)(head % RING), first = k < RING - at ? k : RING - at;
  memcpy(p, data + at, first);
  memcpy((uint8_t *)p + first, data, k - first);
  atomic_store_explicit(&h->head, head + k, memory_order_release);
  ring_bell(r, peer);
  *moved = k;
  return FL_OK;
}

/* Whether one of the links in w can move bytes now. */
static int any_ready(coll_shm_rings *r, const coll_want *w, int nw) {
  for (int i = 0; i < nw; i++) {
    if (w[i].recv) {
      ring_hdr *h = ring_of(r, w[i].peer, r->me, w[i].ch);
      if (atomic_load(&h->tail) != atomic_load(&h->head)) return 1;
    }
    if (w[i].send) {
      ring_hdr *h = ring_of(r, r->me, w[i].peer, w[i].ch);
      if (atomic_load(&h->tail) - atomic_load(&h->head) < RING) return 1;
    }
  }
  return 0;
}

/* Nothing moved: yield for a moment, then sleep on this member's bell
 * (coll_idle_spin / coll_idle_expired keep the timeout). */
static fl_status x_wait(void *vs, const coll_want *w, int nw, coll_idle *idle, const char *op) {
  coll_shm_rings *r = vs;
  if (is_dead(r)) return dead_status(r);
  if (coll_idle_spin(idle)) return FL_OK;
  bell *b = &r->bells[r->me];
  unsigned v = atomic_load_explicit(&b->word, memory_order_acquire);
  if (any_ready(r, w, nw)) {
    idle->last_ms = coll_mono_ms();
    return FL_OK;
  }
  struct timespec ts = {0, 20000000L};
  atomic_fetch_add(&b->sleepers, 1);
  syscall(SYS_futex, (unsigned *)&b->word, FUTEX_WAIT, v, &ts, NULL, 0);
  atomic_fetch_sub(&b->sleepers, 1);
  if (atomic_load(&b->word) != v) {
    idle->last_ms = coll_mono_ms();
    return FL_OK;
  }
  return coll_idle_expired(&r->x, w, nw, idle, op, " in shared memory");
}

/* ------------------------------------------------------------ set-up */

fl_status coll_shm_rings_attach(fl_coll *c, void *region, int n, int me, int nch,
                                const int *ranks, coll_shm_rings **out) {
  *out = NULL;
  coll_shm_rings *r = calloc(1, sizeof *r);
  int *pair = malloc((size_t)n * (size_t)n * sizeof(int));
  if (!r || !pair || number_pairs(n, pair) < 0) {
    free(r);
    free(pair);
    return FL_ERR(FL_ENOMEM, "collective: out of memory for the shared-memory rings");
  }
  r->c = c;
  r->n = n;
  r->me = me;
  r->nch = nch;
  r->ranks = ranks;
  r->pair = pair;
  r->bells = region;
  r->abort = (atomic_uint *)((uint8_t *)region + (size_t)n * sizeof(bell));
  r->rings = (uint8_t *)region + head_bytes(n);
  atomic_init(&r->dead, 0);
  r->x = (coll_xport){r, c, ranks, n, me, nch, c->chunk < RING ? c->chunk : RING,
                      x_send, x_recv, x_wait, NULL};
  *out = r;
  return FL_OK;
}

const coll_xport *coll_shm_rings_xport(const coll_shm_rings *r) { return &r->x; }

void coll_shm_rings_abort(coll_shm_rings *r) {
  if (!r || atomic_exchange(&r->dead, 1)) return;
  atomic_store(r->abort, 1);
  for (int i = 0; i < r->n; i++) ring_bell(r, i);
}

void coll_shm_rings_free(coll_shm_rings *r) {
  if (!r) return;
  free(r->pair);
  free(r);
}
