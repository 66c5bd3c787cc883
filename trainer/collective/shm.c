/* shm.c - the shm backend: ranks on one host reduce through POSIX shared
 * memory (shm_open + mmap) with a futex barrier.
 *
 * The group's first member (the node leader) creates a segment named after
 * the job's session nonce; the others open it, and the leader unlinks the
 * name once everyone is attached (so nothing is left in /dev/shm even if a
 * rank dies later).  The segment holds a header (barrier words, per-rank
 * arrival counters, an abort word), two slots per rank and two result
 * areas of `slot` bytes each.  Every step (one chunk of one op) writes one
 * half, passes a barrier and reads that half; consecutive steps alternate
 * halves, across ops too, so a step's writes can never meet the reads of
 * the step before it (a rank writing half h has passed the barrier of the
 * previous step, which every rank reaches only after its reads of the last
 * step that used h).
 *
 * Allreduce, per chunk cut into n slices: every rank copies the slices
 * other ranks sum into its slot; barrier; rank i sums slice i in rank
 * order (fp32 for 16-bit types, rounded once), reading its own part
 * straight from its buffer and the others' from their slots, and writes
 * the sum to the result area and to its own buffer; barrier; every rank
 * copies the other slices' sums out.  The order of the sum is fixed and
 * every rank gets the bytes the slice's summer produced, so the bits agree
 * everywhere.
 *
 * With a fixed strategy.allreduce_algorithm (ring, halving_doubling,
 * tree) the segment also holds the shared-memory transport's rings
 * (shm_xport.c) and allreduce runs that algorithm of algo.c over them:
 * the bits of the same algorithm over tcp.  Otherwise (auto, the default)
 * allreduce is the direct reduce above, which on one host moves the
 * fewest bytes; broadcast, allgather and barrier are always direct.
 *
 * Waiting: a barrier first polls for a short while (SPIN_NS: a small op's
 * steps take microseconds, far less than a futex sleep and wake-up),
 * calling sched_yield between looks so that a peer waiting for this core
 * runs first (a pure busy-poll measured much worse: it takes the core from
 * the peer it waits for when ranks outnumber cores); then it futex-waits
 * in short slices, checking the communicator's failure state, so that a
 * verdict from rank 0 (a dead or hung rank) ends the wait; a wait that
 * outlasts the verdict's grace names the rank that did not arrive. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll_internal.h"

#define SHM_MAGIC 0x4d485346u /* "FSHM" */
#define HDR_BYTES 8192
#define SPIN_NS 50000u /* a barrier polls (yielding) this long before it sleeps */

typedef struct shm_hdr {
  uint32_t magic;
  uint32_t nranks;
  uint64_t slot;
  atomic_uint ready;
  atomic_uint attached;
  atomic_uint abort;
  atomic_uint count;
  atomic_uint gen;
  atomic_uint sleepers;
  atomic_uint here[FL_CLUSTER_MAX_TRAINERS];
  atomic_uint_fast64_t arrived[FL_CLUSTER_MAX_TRAINERS]; /* barriers entered */
} shm_hdr;

_Static_assert(sizeof(shm_hdr) <= HDR_BYTES, "shm header too large");

typedef struct shm_state {
  fl_coll *c;
  int n, me;
  int *ranks;
  char name[96];
  size_t slot;
  size_t size;
  uint8_t *base;
  shm_hdr *h;
  int unlinked;
  int half; /* the half the next step uses; alternates across ops too */
  atomic_int aborted;
  size_t rings_off;       /* where the transport's rings start (0: none) */
  coll_shm_rings *rings;  /* with a fixed algorithm */
  coll_sched *sched;
  uint64_t seq;
  int algo;               /* COLL_ALGO_RING/HD/TREE over the rings, AUTO: direct */
} shm_state;

static uint8_t *slot_at(shm_state *s, int rank, int half) {
  return s->base + HDR_BYTES + ((size_t)rank * 2 + (size_t)half) * s->slot;
}

static uint8_t *result_at(shm_state *s, int half) {
  return s->base + HDR_BYTES + ((size_t)s->n * 2 + (size_t)half) * s->slot;
}

static void futex_wait(atomic_uint *addr, unsigned val, long ns) {
  struct timespec ts = {0, ns};
  syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr) {
  syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* Failure seen in the segment but not (yet) here: give rank 0's verdict a
 * moment to arrive so the error names the right rank. */
static fl_status failure_status(shm_state *s) {
  fl_coll *c = s->c;
  fl_status st = coll_failed(c);
  uint64_t until = coll_mono_ms() + (uint64_t)(2.0 * c->hb_s * 1000.0) + 1000;
  while (st == FL_OK && coll_mono_ms() < until) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    st = coll_failed(c);
  }
  if (st != FL_OK) return st;
  coll_fail(c, -1, FL_ECLOSED, 1, "another rank on this node left the shared-memory group");
  return FL_ECLOSED;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Poll *addr for up to ns nanoseconds, yielding the core between looks;
 * 1 when it no longer holds val. */
static int spin_until_changed(atomic_uint *addr, unsigned val, uint64_t ns) {
  uint64_t end = 0;
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(addr, memory_order_acquire) != val) return 1;
    sched_yield();
    if ((i & 3) == 0) {
      uint64_t t = now_ns();
      if (!end)
        end = t + ns;
      else if (t >= end)
        return 0;
    }
  }
}

static fl_status barrier(shm_state *s) {
  shm_hdr *h = s->h;
  fl_coll *c = s->c;
  unsigned g = atomic_load(&h->gen);
  uint64_t mine = atomic_fetch_add(&h->arrived[s->me], 1) + 1;
  if (atomic_fetch_add(&h->count, 1) == (unsigned)s->n - 1) {
    atomic_store(&h->count, 0);
    atomic_store(&h->gen, g + 1);
    if (atomic_load(&h->sleepers)) futex_wake_all(&h->gen);
    return FL_OK;
  }
  if (spin_until_changed(&h->gen, g, SPIN_NS)) return FL_OK;
  uint64_t deadline = coll_mono_ms() + (uint64_t)((c->timeout_s + 2.0 * c->hb_s) * 1000.0) + 1000;
  while (atomic_load(&h->gen) == g) {
    if (atomic_load(&s->aborted) || atomic_load(&h->abort)) return failure_status(s);
    atomic_fetch_add(&h->sleepers, 1);
    futex_wait(&h->gen, g, 20000000L);
    atomic_fetch_sub(&h->sleepers, 1);
    if (atomic_load(&h->gen) != g) break;
    if (coll_mono_ms() > deadline) {
      int late = -1;
      for (int j = 0; j < s->n; j++)
        if (atomic_load(&h->arrived[j]) < mine) {
          late = j;
          break;
        }
      char nm[FL_HOST_MAX + 32];
      int r = late >= 0 ? s->ranks[late] : -1;
      coll_fail(c, r, FL_ETIMEDOUT, 0,
                "%s did not arrive at the shared-memory barrier within %.1f s",
                coll_peer_name(c, r, nm, sizeof(nm)), c->timeout_s);
      atomic_store(&h->abort, 1);
      futex_wake_all(&h->gen);
      return FL_ETIMEDOUT;
    }
  }
  return FL_OK;
}

/* ------------------------------------------------------------ set-up */

static fl_status wait_until(shm_state *s, uint64_t deadline, const char *what) {
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, NULL);
  fl_status st = coll_failed(s->c);
  if (st != FL_OK) return st;
  if (coll_mono_ms() > deadline) {
    char nm[FL_HOST_MAX + 32];
    coll_fail(s->c, s->ranks[0], FL_ETIMEDOUT, 0, "shm: %s from %s within %.1f s", what,
              coll_peer_name(s->c, s->ranks[0], nm, sizeof(nm)), s->c->timeout_s);
    return FL_ETIMEDOUT;
  }
  return FL_OK;
}

static fl_status shm_init(fl_coll *c, const coll_group *g, void **state) {
  *state = NULL;
  shm_state *s = calloc(1, sizeof(*s));
  if (!s) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  *state = s;
  s->c = c;
  s->n = g->n;
  s->me = g->me;
  atomic_init(&s->aborted, 0);
  s->ranks = malloc((size_t)g->n * sizeof(int));
  if (!s->ranks) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  memcpy(s->ranks, g->ranks, (size_t)g->n * sizeof(int));
  if (s->n == 1) return FL_OK;
  s->slot = (c->chunk + 63) & ~(size_t)63;
  s->size = HDR_BYTES + ((size_t)s->n * 2 + 2) * s->slot;
  if (c->algo_req == COLL_ALGO_RING || c->algo_req == COLL_ALGO_HD ||
      c->algo_req == COLL_ALGO_TREE) {
    size_t rb = coll_shm_rings_size(s->n, c->nrings);
    if (!rb) return FL_ERR(FL_ENOMEM, "collective: out of memory");
    s->rings_off = s->size;
    s->size += rb;
    s->algo = c->algo_req;
  }
  snprintf(s->name, sizeof(s->name), "/flotilla-%016llx-%u-%d", (unsigned long long)c->session,
           g->tag, g->ranks[0]);
  uint64_t deadline = coll_mono_ms() + (uint64_t)(c->timeout_s * 1000.0);
  int fd = -1;
  if (s->me == 0) {
    shm_unlink(s->name);
    fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
      return FL_ERR(FL_EIO, "shm: cannot create %s: %s", s->name, strerror(errno));
    if (ftruncate(fd, (off_t)s->size) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(s->name);
      s->unlinked = 1;
      return FL_ERR(FL_EIO, "shm: cannot size %s to %zu bytes: %s", s->name, s->size,
                    strerror(e));
    }
  } else {
    for (;;) {
      fd = shm_open(s->name, O_RDWR, 0600);
      if (fd >= 0) {
        struct stat sb;
        if (fstat(fd, &sb) == 0 && (size_t)sb.st_size == s->size) break;
        close(fd);
        fd = -1;
      } else if (errno != ENOENT) {
        return FL_ERR(FL_EIO, "shm: cannot open %s: %s", s->name, strerror(errno));
      }
      FL_TRY(wait_until(s, deadline, "no shared-memory segment"));
    }
  }
  void *p = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    if (s->me == 0) {
      shm_unlink(s->name);
      s->unlinked = 1;
    }
    return FL_ERR(FL_EIO, "shm: cannot map %s (%zu bytes): %s", s->name, s->size, strerror(e));
  }
  s->base = p;
  s->h = p;
  if (s->me == 0) {
    s->h->magic = SHM_MAGIC;
    s->h->nranks = (uint32_t)s->n;
    s->h->slot = s->slot;
    atomic_store(&s->h->ready, 1);
  } else {
    while (!atomic_load(&s->h->ready)) FL_TRY(wait_until(s, deadline, "segment not ready"));
    if (s->h->magic != SHM_MAGIC || s->h->nranks != (uint32_t)s->n || s->h->slot != s->slot)
      return FL_ERR(FL_EPROTO, "shm: segment %s does not match this group", s->name);
  }
  atomic_store(&s->h->here[s->me], 1);
  atomic_fetch_add(&s->h->attached, 1);
  if (s->me == 0) {
    while (atomic_load(&s->h->attached) < (unsigned)s->n) {
      fl_status st = coll_failed(c);
      if (st != FL_OK) return st;
      if (coll_mono_ms() > deadline) {
        int miss = 1;
        while (miss < s->n && atomic_load(&s->h->here[miss])) miss++;
        char nm[FL_HOST_MAX + 32];
        int r = s->ranks[miss < s->n ? miss : s->n - 1];
        coll_fail(c, r, FL_ETIMEDOUT, 0, "shm: %s did not attach within %.1f s",
                  coll_peer_name(c, r, nm, sizeof(nm)), c->timeout_s);
        return FL_ETIMEDOUT;
      }
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    shm_unlink(s->name);
    s->unlinked = 1;
  }
  if (!s->rings_off) return FL_OK;
  FL_TRY(coll_sched_new(s->n, c->nrings, &s->sched));
  return coll_shm_rings_attach(c, s->base + s->rings_off, s->n, s->me, c->nrings, s->ranks,
                               &s->rings);
}

/* ------------------------------------------------------------- ops */

static fl_status check(shm_state *s) {
  if (atomic_load(&s->aborted) || atomic_load(&s->h->abort)) return failure_status(s);
  return FL_OK;
}

/* Sum over the group; copy the result out on every rank (root < 0) or on
 * group member `root` only (the others' buffers are left as they were).
 * Slice j of each chunk is summed by member j straight from its own
 * buffer, so a rank copies in, and copies out, only the (n-1)/n of the
 * data that other ranks sum: two passes over the data fewer than copying
 * whole chunks. */
static fl_status reduce(shm_state *s, void *vbuf, size_t count, fl_coll_dtype dt, int root) {
  if (s->n == 1 || count == 0) return FL_OK;
  FL_TRY(check(s));
  uint8_t *buf = vbuf;
  size_t es = fl_coll_dtype_size(dt);
  size_t ce = s->slot / es;
  int out = root < 0 || root == s->me;
  const void *srcs[FL_CLUSTER_MAX_TRAINERS];
  for (size_t off = 0; off < count; off += ce) {
    int half = s->half;
    s->half ^= 1;
    size_t m = count - off < ce ? count - off : ce;
    uint8_t *chunk = buf + off * es, *slot = slot_at(s, s->me, half), *res = result_at(s, half);
    size_t so, sl;
    for (int j = 0; j < s->n; j++) {
      coll_segment(m, s->n, j, &so, &sl);
      if (j != s->me && sl) memcpy(slot + so * es, chunk + so * es, sl * es);
    }
    FL_TRY(barrier(s));
    coll_segment(m, s->n, s->me, &so, &sl);
    if (sl) {
      for (int j = 0; j < s->n; j++)
        srcs[j] = j == s->me ? chunk + so * es : slot_at(s, j, half) + so * es;
      coll_reduce_many(dt, res + so * es, out ? chunk + so * es : NULL, srcs, s->n, sl);
    }
    FL_TRY(barrier(s));
    if (!out) continue;
    for (int j = 0; j < s->n; j++) {
      coll_segment(m, s->n, j, &so, &sl);
      if (j != s->me && sl) memcpy(chunk + so * es, res + so * es, sl * es);
    }
  }
  return FL_OK;
}

static fl_status shm_allreduce(void *vs, void *buf, size_t count, fl_coll_dtype dt) {
  shm_state *s = vs;
  if (!s->rings || s->algo == COLL_ALGO_AUTO || s->n == 1 || count == 0)
    return reduce(vs, buf, count, dt, -1);
  FL_TRY(check(s));
  coll_op a = {COLL_OP_ALLREDUCE, s->algo, buf, count, dt, 0, ++s->seq, 0, 0};
  return coll_sched_run(s->sched, coll_shm_rings_xport(s->rings), &a);
}

/* Without rings (no algorithm fixed at start) the direct reduce stays. */
static fl_status shm_set_algorithm(void *vs, int algo) {
  shm_state *s = vs;
  if (s->rings) s->algo = algo == COLL_ALGO_HIER ? COLL_ALGO_AUTO : algo;
  return FL_OK;
}

static fl_status shm_reduce(void *vs, void *buf, size_t count, fl_coll_dtype dt, int root) {
  return reduce(vs, buf, count, dt, root);
}

static fl_status shm_broadcast(void *vs, void *vbuf, size_t bytes, int root) {
  shm_state *s = vs;
  if (s->n == 1 || bytes == 0) return FL_OK;
  FL_TRY(check(s));
  uint8_t *buf = vbuf;
  for (size_t off = 0; off < bytes; off += s->slot) {
    int half = s->half;
    s->half ^= 1;
    size_t m = bytes - off < s->slot ? bytes - off : s->slot;
    if (s->me == root) memcpy(result_at(s, half), buf + off, m);
    FL_TRY(barrier(s));
    if (s->me != root) memcpy(buf + off, result_at(s, half), m);
  }
  return FL_OK;
}

static fl_status shm_allgather(void *vs, const void *send, size_t bytes, void *vrecv) {
  shm_state *s = vs;
  uint8_t *recv = vrecv;
  if (bytes && recv + (size_t)s->me * bytes != send)
    memmove(recv + (size_t)s->me * bytes, send, bytes);
  if (s->n == 1 || bytes == 0) return FL_OK;
  FL_TRY(check(s));
  const uint8_t *mine = recv + (size_t)s->me * bytes;
  for (size_t off = 0; off < bytes; off += s->slot) {
    int half = s->half;
    s->half ^= 1;
    size_t m = bytes - off < s->slot ? bytes - off : s->slot;
    memcpy(slot_at(s, s->me, half), mine + off, m);
    FL_TRY(barrier(s));
    for (int j = 0; j < s->n; j++)
      if (j != s->me) memcpy(recv + (size_t)j * bytes + off, slot_at(s, j, half), m);
  }
  return FL_OK;
}

static fl_status shm_barrier(void *vs) {
  shm_state *s = vs;
  if (s->n == 1) return FL_OK;
  FL_TRY(check(s));
  return barrier(s);
}

static void shm_abort(void *vs) {
  shm_state *s = vs;
  atomic_store(&s->aborted, 1);
  coll_shm_rings_abort(s->rings);
  if (s->h) {
    atomic_store(&s->h->abort, 1);
    futex_wake_all(&s->h->gen);
  }
}

static void shm_destroy(void *vs) {
  shm_state *s = vs;
  if (!s) return;
  coll_shm_rings_free(s->rings);
  coll_sched_free(s->sched);
  if (s->base) munmap(s->base, s->size);
  if (s->me == 0 && s->name[0] && !s->unlinked) shm_unlink(s->name);
  free(s->ranks);
  free(s);
}

const coll_backend fl_coll_shm_backend = {
    "shm", shm_init, shm_allreduce, shm_broadcast, shm_allgather, shm_barrier, shm_abort,
    shm_destroy, shm_reduce, shm_set_algorithm, NULL};
