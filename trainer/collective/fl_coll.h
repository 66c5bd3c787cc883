/* fl_coll.h - the collective engine: allreduce, broadcast, allgather and
 * barrier among the trainers of a job (docs/DESIGN.md section 4).
 *
 * A communicator (fl_coll) is made once per job by every rank.  Creating it
 *   1. binds this rank's endpoint (libuv, on a loop thread of its own);
 *   2. runs the rendezvous at rank 0's endpoint: every rank presents the
 *      shared token, its rank and its data endpoint; a wrong token is
 *      refused (logged with the peer's address) and cannot join; rank 0
 *      hands out the rank table, a session nonce and, in CUDA builds with
 *      the nccl backend, the NCCL unique id;
 *   3. keeps the rendezvous connection as a control channel to rank 0 that
 *      carries heartbeats and abort verdicts, so that a rank which dies,
 *      hangs or never arrives is named on every other rank;
 *   4. initialises the backend:
 *        tcp   ring allreduce over TCP (reduce-scatter, then allgather),
 *              chunked and pipelined over `nrings` parallel rings;
 *        shm   all ranks on one host reduce through POSIX shared memory;
 *        nccl  NCCL communicators (CUDA builds only);
 *        hierarchical (use_hierarchical_allreduce): shm inside each node,
 *              a tcp ring among the node leaders (the lowest rank of each
 *              node; a node is the host of an endpoint), shm broadcast.
 *
 * Numerics.  Every reduction runs in a fixed order that depends only on the
 * rank count and the buffer size, and every rank receives the same final
 * bytes, so the result is bitwise identical on all ranks and in every run.
 * fp16 and bf16 are added in fp32 and rounded to their type once per
 * addition step (tcp: once per ring hop, so the wire carries 16 bits; shm:
 * once at the end); fp64 (for metrics) is added in fp64.
 *
 * Failure.  Every collective has a timeout (collective_timeout_s).  A rank
 * that closes its connections, stops heartbeating or does not arrive at a
 * collective the others are in is named in one error line on every rank,
 * e.g. "allreduce #17: rank 2 (127.0.0.3:29500) did not respond within
 * 30.0 s", and every later call returns an error (FL_ETIMEDOUT or
 * FL_ECLOSED), so the job exits instead of hanging.
 *
 * Threads.  The engine runs a libuv loop thread (network) and a worker
 * thread that executes the queued collectives one at a time, in call order
 * (the same order on every rank); a blocking call that finds nothing
 * queued runs on the calling thread instead, saving two thread switches.
 * The fl_coll_* calls themselves must come from one thread at a time.  Data buffers are host memory, except with the
 * nccl backend, which takes device or host pointers. */
#ifndef FL_COLL_H
#define FL_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_cluster.h"
#include "fl_status.h"

typedef enum fl_coll_dtype {
  FL_COLL_F32 = 0,
  FL_COLL_F16 = 1, /* IEEE binary16 */
  FL_COLL_BF16 = 2,
  FL_COLL_F64 = 3
} fl_coll_dtype;

/* Size in bytes of one element of dt (0 for an unknown dtype). */
size_t fl_coll_dtype_size(fl_coll_dtype dt);
const char *fl_coll_dtype_name(fl_coll_dtype dt);

typedef struct fl_coll_options {
  int rank;       /* 0 .. world_size-1 */
  int world_size; /* >= 1; 1 makes every collective a local no-op */
  /* world_size endpoints in rank order.  endpoints[0] is the rendezvous
   * address; this rank listens at endpoints[rank] (port 0 = any free port,
   * allowed for ranks other than 0).  The array is copied. */
  const fl_endpoint *endpoints;
  /* A socket already bound to endpoints[rank] (listening or not), or -1 to
   * bind here.  The engine owns it from the call on, even on failure. */
  int listen_fd;
  const char *token;   /* shared token; NULL or "" = no authentication */
  const char *backend; /* "tcp", "shm", "nccl" or "auto"/NULL (see below) */
  int hierarchical;    /* use_hierarchical_allreduce */
  int ranks_per_node;  /* hierarchical_allreduce_inter_nranks; 0 = any */
  int nrings;          /* nccl_comm_num: parallel rings / communicators */
  double timeout_s;    /* collective_timeout_s (> 0) */
  size_t chunk_bytes;  /* pipelining unit; 0 = default (FL_COLL_CHUNK) */
  int gpu;             /* nccl: CUDA device to use; -1 = this rank's index
                        * on its node modulo the device count */
  /* strategy.allreduce_algorithm: "auto" (NULL), "ring", "halving_doubling",
   * "tree" or "hierarchical" (as use_hierarchical_allreduce).  auto: rank 0
   * probes the network at create and picks per bucket size by the
   * alpha-beta model; the others follow its choice. */
  const char *algorithm;
  /* rank 0: the tuning of an earlier run (fl_coll_get_tuning, kept in the
   * checkpoint), reused instead of a probe when the group size matches. */
  const void *tuning;
  size_t tuning_len;
  /* NULL, or asked every 100 ms while create waits for the rendezvous:
   * nonzero gives it up at once (create returns FL_EAGAIN) instead of
   * waiting timeout_s for a peer that will not come (an elastic trainer
   * whose next world is already named).  Called on create's thread, and
   * on rank 0 also on the engine's loop thread before each rank table is
   * sent (nonzero there aborts every rank): it must be thread-safe. */
  int (*give_up)(void *arg);
  void *give_up_arg;
} fl_coll_options;

#define FL_COLL_CHUNK ((size_t)1 << 19)

/* Options with the defaults: rank 0 of 1, no endpoints, listen_fd -1,
 * backend "auto", one ring, 120 s timeout, gpu -1.  "auto" picks the hierarchical
 * composition when `hierarchical` is set, shm when every rank is on one
 * host, tcp otherwise. */
fl_coll_options fl_coll_options_default(void);

typedef struct fl_coll fl_coll;
typedef struct fl_coll_req fl_coll_req;

/* Make the communicator (collective: every rank calls it).  Blocks until
 * the rendezvous and the backend set-up are done or timeout_s passed.  On
 * success the caller owns *out (fl_coll_destroy). */
fl_status fl_coll_create(const fl_coll_options *opt, fl_coll **out);

/* Finish: when no error happened, wait until every rank has called
 * fl_coll_destroy (so no rank tears down connections another still needs;
 * bounded by timeout_s), then close everything and free c.  NULL is fine. */
void fl_coll_destroy(fl_coll *c);

/* Mark the communicator failed with `reason` (a short text, copied): the
 * pending and later calls here return FL_ECLOSED, and rank 0 tells every
 * other rank that this rank aborted.  Safe from any thread. */
void fl_coll_abort(fl_coll *c, const char *reason);

int fl_coll_rank(const fl_coll *c);
int fl_coll_world_size(const fl_coll *c);
/* The backend in use: "tcp", "shm", "nccl", "hier(shm+tcp)", "local". */
const char *fl_coll_backend_name(const fl_coll *c);

/* Sum count elements of buf over all ranks, in place.  The caller keeps
 * ownership of buf. */
fl_status fl_coll_allreduce(fl_coll *c, void *buf, size_t count, fl_coll_dtype dt);

/* Copy rank root's `bytes` bytes of buf into buf on every rank. */
fl_status fl_coll_broadcast(fl_coll *c, void *buf, size_t bytes, int root);

/* recv (world_size * bytes) receives every rank's `bytes` bytes of send, in
 * rank order.  send may point into recv at this rank's block. */
fl_status fl_coll_allgather(fl_coll *c, const void *send, size_t bytes, void *recv);

/* Return once every rank has entered the barrier. */
fl_status fl_coll_barrier(fl_coll *c);

/* Collective (every rank, in order with the others): allreduce with
 * `name` (auto, ring, halving_doubling, tree) from now on.  Backends
 * without algorithms (shm's own reduce, nccl) ignore it. */
fl_status fl_coll_set_algorithm(fl_coll *c, const char *name);

/* The allreduce tuning this rank follows (fitted model and per-size
 * choice), FL_COLL_TUNING_MAX bytes at most, for a checkpoint; *len = 0
 * when there is none (one rank, shm, nccl).  Any thread after create. */
#define FL_COLL_TUNING_MAX 128
fl_status fl_coll_get_tuning(const fl_coll *c, void *out, size_t cap, size_t *len);

/* Non-blocking allreduce: queue it and return at once; *req is owned by
 * the caller until fl_coll_wait, which frees it.  buf must stay untouched
 * until then.  Requests complete in the order they were queued. */
fl_status fl_coll_iallreduce(fl_coll *c, void *buf, size_t count, fl_coll_dtype dt,
                             fl_coll_req **req);
/* Wait for req, free it and return its status.  NULL req is FL_EINVAL. */
fl_status fl_coll_wait(fl_coll *c, fl_coll_req *req);

#endif
