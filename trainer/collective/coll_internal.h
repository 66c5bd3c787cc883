/* coll_internal.h - what the parts of the collective engine share (never
 * installed): the communicator struct, the backend function-pointer table,
 * framed connections on the libuv loop, the wire constants, and the
 * reduction helpers.
 *
 * Threads: the loop thread owns every uv handle; other threads reach it
 * through coll_loop_post().  One collective runs at a time (exec_busy), on
 * the worker thread, or on the calling thread for a blocking call that
 * finds nothing queued; a backend that uses the network posts its
 * work to the loop and waits on c->cv.  c->mu guards the failure state, the
 * inbox and every flag a waiter sleeps on. */
#ifndef FL_COLL_INTERNAL_H
#define FL_COLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "fl_coll.h"
#include "fl_log.h"

/* ------------------------------------------------------------------ wire */

#define COLL_MAGIC 0x4f434c46u /* "FLCO" read as little-endian u32 */
#define COLL_VERSION 1u
#define COLL_FRAME_MAX (1u << 20) /* largest control frame payload */
#define COLL_HELLO_MAX 4096u      /* largest frame before the token is checked */

/* Frame types: every control frame is {u32 type, u32 len} + len bytes. */
enum {
  MSG_REGISTER = 1,   /* rank -> rank 0: join the job (hello payload) */
  MSG_TABLE = 2,      /* rank 0 -> rank: session, rank table, blob */
  MSG_REJECT = 3,     /* refusal, payload: reason text */
  MSG_DATA_HELLO = 4, /* rank -> rank: open a data connection (hello payload) */
  MSG_ACK = 5,        /* data connection accepted */
  MSG_HB = 6,         /* heartbeat, payload: u64 collectives entered */
  MSG_REPORT = 7,     /* rank -> rank 0: a failure seen here */
  MSG_ABORT = 8,      /* rank 0 -> ranks: the job failed (verdict) */
  MSG_BYE = 9,        /* rank -> rank 0: done, payload: u64 entered */
  MSG_BYE_ACK = 10    /* rank 0 -> ranks: everyone is done */
};

static inline void coll_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void coll_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void coll_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t coll_get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t coll_get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t coll_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline void coll_put_f64(uint8_t *p, double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  coll_put_u64(p, b);
}
static inline double coll_get_f64(const uint8_t *p) {
  uint64_t b = coll_get_u64(p);
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

/* The hello that opens every connection (MSG_REGISTER / MSG_DATA_HELLO). */
typedef struct coll_hello {
  uint32_t magic, version;
  int32_t rank, world;
  uint64_t session; /* 0 in REGISTER */
  uint32_t tag;     /* which group's connection (data) */
  uint32_t ring;    /* which parallel ring (data) */
  uint16_t port;    /* the sender's data port (REGISTER) */
  char host[FL_HOST_MAX];
  size_t token_len;
  char token[FL_TOKEN_MAX];
} coll_hello;

/* Encode h into out (cap bytes); returns the length, 0 if it does not fit. */
size_t coll_hello_encode(const coll_hello *h, uint8_t *out, size_t cap);
/* Decode; FL_EPROTO (not logged) for a malformed payload. */
fl_status coll_hello_decode(const uint8_t *p, size_t len, coll_hello *h);

/* Constant-time comparison of a presented token with the expected one
 * (time depends only on the expected length).  1 when equal. */
int coll_token_equal(const char *expected, size_t elen, const char *got, size_t glen);

/* ------------------------------------------------------------ reductions */

/* dst[i] = src[i] + dst[i] for n elements (16-bit types: added in fp32,
 * rounded once; the order of the two operands is fixed). */
void coll_reduce_into(fl_coll_dtype dt, void *dst, const void *src, size_t n);
/* dst[i] = srcs[0][i] + srcs[1][i] + ... + srcs[k-1][i], added in that
 * order in fp32 (fp64 for F64) and rounded to dt once; the sum is written
 * to dst and, when dst2 is not NULL, to dst2 as well.  dst or dst2 may be
 * one of the sources (each block is read before it is written). */
void coll_reduce_many(fl_coll_dtype dt, void *dst, void *dst2, const void *const *srcs, int k,
                      size_t n);

/* Segment j of a range of `count` elements cut into n near-equal parts
 * (the first count % n get one more): its first element and length. */
static inline void coll_segment(size_t count, int n, int j, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n, uj = (size_t)j;
  *off = uj * base + (uj < rem ? uj : rem);
  *len = base + (uj < rem ? 1 : 0);
}

/* ------------------------------------------------------------ connections */

struct coll_conn;
typedef void (*coll_frame_cb)(struct coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len);
typedef void (*coll_err_cb)(struct coll_conn *cn, int uverr);

/* One TCP connection on the loop.  In framed mode the reader delivers whole
 * frames to on_frame; a backend may take the connection over for raw data
 * (coll_conn_stop_frames) and read with its own callbacks. */
typedef struct coll_conn {
  uv_tcp_t tcp; /* first: a uv handle pointer is a coll_conn pointer */
  fl_coll *c;
  int peer_rank;     /* -1 until known */
  char peer_addr[80]; /* "ip:port" as seen on the socket */
  uint32_t tag, ring; /* data connections: which group and ring */
  uint64_t session;   /* data connections: the session the peer presented */
  int framed;         /* the frame reader is active */
  uint32_t max_frame; /* largest payload accepted: small until authenticated */
  uint64_t born_ms;   /* accepted at (loop time): a hello must follow in time */
  int closing;
  uint8_t hdr[8];
  size_t hdr_got;
  uint8_t *payload;
  uint32_t plen, ptype;
  size_t pgot;
  coll_frame_cb on_frame;
  coll_err_cb on_error;
  void *owner;           /* whoever reads it now */
  void *owned;           /* malloc'd state freed with the connection */
  struct coll_conn *next; /* pending list */
  struct coll_conn *all_next; /* every live conn of c (for teardown) */
} coll_conn;

/* Start framed reading on cn (loop thread).  Returns a uv error code. */
int coll_conn_read_frames(coll_conn *cn);
/* Stop the frame reader (so a backend can read raw bytes). */
void coll_conn_stop_frames(coll_conn *cn);
/* Queue one frame (copied); loop thread.  Returns a uv error code. */
int coll_conn_send(coll_conn *cn, uint32_t type, const void *p, uint32_t len);
/* Close and free cn (loop thread); idempotent. */
void coll_conn_close(coll_conn *cn);

/* A peer that the backend asked to connect to or to accept from. */
typedef void (*coll_data_cb)(fl_coll *c, void *arg, coll_conn *cn);
/* Open a data connection to `peer` (loop thread): connect, hello, wait for
 * the ACK, then cb(c, arg, cn); on failure the communicator fails. */
void coll_connect_data(fl_coll *c, int peer, uint32_t tag, uint32_t ring, coll_data_cb cb,
                       void *arg);
/* Take the authenticated connection from `peer` for (tag, ring) when it
 * arrives (or has arrived); cb as above (loop thread). */
void coll_claim_data(fl_coll *c, int peer, uint32_t tag, uint32_t ring, coll_data_cb cb,
                     void *arg);

/* ------------------------------------------------------------ algorithms */

/* The allreduce algorithms (strategy.allreduce_algorithm), written once in
 * algo.c over a point-to-point transport.  Hierarchical is the composition
 * of hier.c (shm inside a node, tcp across), chosen per job. */
enum { COLL_ALGO_AUTO = 0, COLL_ALGO_RING, COLL_ALGO_HD, COLL_ALGO_TREE, COLL_ALGO_HIER, COLL_ALGO_N };
extern const char *const coll_algo_names[COLL_ALGO_N + 1];
/* The index of an algorithm's name, or -1. */
int coll_algo_find(const char *name);

enum { COLL_OP_ALLREDUCE = 1, COLL_OP_BROADCAST = 2, COLL_OP_ALLGATHER = 3 };

/* A link the executor waits on: receive pending, send ready; need: the
 * bytes the link must bring before the executor can do more with them
 * (the rest of the op's header and of the op being received), so that a
 * transport may sleep until that many are there (0: any). */
typedef struct coll_want {
  int peer, ch;
  int recv, send;
  size_t need;
} coll_want;

/* Executor's idle bookkeeping, kept by the transport's wait. */
typedef struct coll_idle {
  uint64_t since_ns; /* 0: something just moved */
  uint64_t last_ms;  /* last progress (mono ms), 0 = not yet */
} coll_idle;

/* A point-to-point transport among the n members of a group: byte streams
 * to and from every peer (group index) on nch channels, moved without
 * blocking.  send/recv set *moved (0: nothing now) and return FL_OK or a
 * failure (already reported through coll_fail).  wait is called when
 * nothing moved: it waits a moment for the links in w to become ready,
 * and fails the communicator, naming the peer, when none did for the
 * collective timeout. */
/* The two ends of a transport's wait (algo.c).  coll_idle_mark: the first
 * call of an idle spell marks its start (a transport that sleeps at once,
 * as tcp does, calls it before its sleep).  coll_idle_spin: marks the
 * start too; for a short while after it the
 * call only yields the core and returns 1 (the caller returns FL_OK: the
 * peer is likely about to move), then 0 (the caller sleeps on its links).
 * coll_idle_expired, after a sleep that saw nothing: FL_OK while the
 * rank-0 verdict's grace since the last progress runs, else the
 * communicator fails naming the peer this rank waits on (the first it
 * receives from, else the first it sends to); `where` ends the message
 * (e.g. " in shared memory", or ""). */
struct coll_xport;
void coll_idle_mark(coll_idle *idle);
int coll_idle_spin(coll_idle *idle);
fl_status coll_idle_expired(const struct coll_xport *x, const coll_want *w, int nw,
                            const coll_idle *idle, const char *op, const char *where);

typedef struct coll_xport {
  void *st;
  fl_coll *c;
  const int *ranks; /* group index -> global rank */
  int n, me, nch;
  size_t chunk; /* pipelining unit in bytes */
  fl_status (*send)(void *st, int peer, int ch, const void *p, size_t len, size_t *moved);
  fl_status (*recv)(void *st, int peer, int ch, void *p, size_t len, size_t *moved);
  fl_status (*wait)(void *st, const coll_want *w, int nw, coll_idle *idle, const char *op);
  /* Optional (NULL: send twice): a then b in one write, as send moves
   * them; the executor puts an op's header and its first piece out
   * together, one segment fewer per link and op on a network. */
  fl_status (*send2)(void *st, int peer, int ch, const void *a, size_t alen, const void *b,
                     size_t blen, size_t *moved);
} coll_xport;

/* One collective for the executor: buf holds count elements of dt
 * (allreduce) or count bytes (broadcast; allgather: bytes per rank, buf
 * the whole result with this rank's block in place). */
typedef struct coll_op {
  int kind, algo; /* algo: COLL_ALGO_RING/HD/TREE (allreduce only) */
  void *buf;
  size_t count;
  fl_coll_dtype dt;
  int root;
  uint64_t seq; /* checked against the peers' */
  size_t seg;   /* allreduce piece in bytes (coll_algo_seg); 0: x->chunk */
  int doubling; /* halving_doubling by recursive doubling (coll_algo_doubling) */
} coll_op;

typedef struct coll_sched coll_sched;
/* A reusable schedule for groups of n with nch channels; caller owns it. */
fl_status coll_sched_new(int n, int nch, coll_sched **out);
void coll_sched_free(coll_sched *s);
/* Build op a's schedule and run it over x on this thread. */
fl_status coll_sched_run(coll_sched *s, const coll_xport *x, const coll_op *a);
/* The group indices any algorithm of a group of n talks to from me
 * (written to out, n entries suffice); their count, -1 out of memory. */
int coll_algo_peers(int n, int me, int *out);

/* The alpha-beta(-gamma) model: seconds per message, per byte on the
 * wire, per byte reduced; and per algorithm (index algo - COLL_ALGO_RING:
 * ring, halving-doubling, tree) the factors by which its latency term
 * (lat) and its bandwidth term (eff) really take longer than alpha, beta
 * and gamma of one link say, as measured on the whole group (0 or 1:
 * none). */
#define COLL_MODEL_ALGOS 3
typedef struct coll_model {
  double alpha, beta, gamma;
  double lat[COLL_MODEL_ALGOS], eff[COLL_MODEL_ALGOS];
} coll_model;
#define COLL_TABLE_BINS 40 /* bin b: buckets of up to 2^b bytes */
/* Predicted allreduce time of algo over n ranks for a buffer of bytes
 * sent in pieces of seg bytes (the tree's; 0: one piece per tree): its
 * factors times its two terms, which coll_model_terms gives without the
 * factors (either pointer may be NULL). */
double coll_model_time(const coll_model *m, int algo, int n, double bytes, double seg);
void coll_model_terms(const coll_model *m, int algo, int n, double bytes, double seg, double *lat,
                      double *bw);
/* The piece in which algo runs a bucket of bytes over n ranks with model
 * m, the same on every rank that holds the same tuning: for the tree the
 * one that the model's alpha, beta and gamma say is fastest (a power of
 * two, COLL_SEG_MIN..COLL_SEG_MAX); 0 (the transport's chunk) for the
 * other algorithms, and for a model that was not probed. */
#define COLL_SEG_MIN ((size_t)4 << 10)
#define COLL_SEG_MAX ((size_t)4 << 20)
size_t coll_algo_seg(const coll_model *m, int algo, int n, size_t bytes);
/* Whether algo runs a bucket of bytes over n ranks by recursive doubling
 * (1: halving_doubling where the model's alpha, beta and gamma make its
 * fewer exchanges of the whole bucket faster than halving's; 0 for a model
 * that was not probed; the same from the same tuning). */
int coll_algo_doubling(const coll_model *m, int algo, int n, size_t bytes);
/* coll_model_time in the pieces coll_algo_seg gives, as buckets run. */
double coll_model_predict(const coll_model *m, int algo, int n, size_t bytes);
/* The fastest of ring, halving-doubling and tree per size bin. */
void coll_model_table(const coll_model *m, int n, uint8_t table[COLL_TABLE_BINS]);
int coll_table_bin(size_t bytes);

/* The tuning rank 0 decides and broadcasts: the fitted model and the
 * algorithm per size bin, for a group of n ranks (kept in checkpoints). */
typedef struct coll_tuning {
  int n;
  coll_model m;
  uint8_t table[COLL_TABLE_BINS];
} coll_tuning;
#define COLL_TUNING_BYTES (16 + 24 + 16 * COLL_MODEL_ALGOS + COLL_TABLE_BINS)
#define COLL_TUNING_VERSION 2u
void coll_tuning_encode(const coll_tuning *t, uint8_t out[COLL_TUNING_BYTES]);
/* FL_EPROTO (not logged) for a blob of another version or a bad table. */
fl_status coll_tuning_decode(const uint8_t *p, size_t len, coll_tuning *t);
/* tune.c: the group probe's source of times, a parameter so that a test
 * can stand in for the network.  run(arg, algo, len, &secs): one allreduce
 * of algo over len bytes on every member, this member's seconds in *secs;
 * share(arg, &v): every member's *v becomes member 0's. */
typedef struct coll_probe_clock {
  fl_status (*run)(void *arg, int algo, size_t len, double *secs);
  fl_status (*share)(void *arg, uint32_t *v);
  void *arg;
} coll_probe_clock;
/* The group probe's pick per size (k 0: the small one, 1: the large):
 * fast[k], the algorithm (index: ring, halving-doubling, tree) the table
 * takes there; close[k], the two fastest by their medians when these lie
 * within 15% of each other ({-1, -1} when not), and paired[k], the median
 * over the rounds of close[k][0]'s time over close[k][1]'s in the same
 * round (0 when not close); by_rule[k]: 1 when that ratio was within 5%
 * of 1 and the fixed preference chose (tune.c).  Above the large size:
 * huge[i], the median time of the ring (0) and halving-doubling (1) at 4
 * times the large size, huge_paired the median of the ring's time over
 * halving-doubling's in the same round (coll_tune_fit extrapolates them
 * to every larger bucket). */
typedef struct coll_probe_pick {
  int fast[2];
  int close[2][2];
  double paired[2];
  int by_rule[2];
  double huge[2], huge_paired;
} coll_probe_pick;
/* Every member: the group probe at bytes and bytes / 16, each algorithm
 * in turn (ring, halving-doubling, tree at the small size, then at the
 * large, round after round): a warm-up round, then as many rounds as
 * member 0 says fit the probe's time budget (at least 5, at most 9),
 * then as many again of the two fastest at a size where member 0 found
 * their medians within 15% of each other (if that takes at most 0.5 s),
 * then 3 rounds of the ring and halving-doubling at 4 times bytes;
 * med[k][i]: the median of algorithm i's rounds at the small (k 0) and
 * the large size (k 1); *rounds: how many (before those); *pick: what
 * the table takes at each size.  The caller owns everything. */
fl_status coll_group_probe(const coll_probe_clock *c, size_t bytes,
                           double med[2][COLL_MODEL_ALGOS], int *rounds, coll_probe_pick *pick);
/* Member 0: t's factors for a group of n ranks from the group probe's
 * medians at bytes / 16 and bytes (t's alpha, beta, gamma set before,
 * which fix the tree's pieces, coll_algo_seg, in the probe as in every
 * bucket), and t's table, which takes p->fast[k] at the two measured
 * sizes and, beyond them, the ring or halving-doubling by p->huge
 * extrapolated to each size (see tune.c).  The caller owns t. */
void coll_tune_fit(coll_tuning *t, int n, size_t bytes, const double med[2][COLL_MODEL_ALGOS],
                   const coll_probe_pick *p);
/* tune.c: the group's allreduce choice, on every member after the links
 * are up.  A fixed c->algo_req sets *algo and nothing moves.  Otherwise
 * (*algo = COLL_ALGO_AUTO) group member 0 takes the tuning restored from
 * a checkpoint when it was made for this group size, else probes the link
 * to member 1 (ping-pong of a few sizes, well under a second) and fits
 * the model; then it broadcasts the tuning, which every member keeps in
 * *t.  *seq counts the ops run on x. */
fl_status coll_tune(const coll_xport *x, coll_sched *s, uint64_t *seq, int *algo, coll_tuning *t);


/* ------------------------------------------------------------- backends */

/* The ranks a backend instance serves: members (global ranks) in the
 * group's order; me is this rank's index in it. */
typedef struct coll_group {
  int n, me;
  int *ranks; /* n entries, owned by the group's creator */
  uint32_t tag;
} coll_group;

/* init sets *state even when it fails (to NULL or to a partial state);
 * the engine calls destroy on it once the loop thread has stopped, so no
 * loop callback can still see it. */
typedef struct coll_backend {
  const char *name;
  fl_status (*init)(fl_coll *c, const coll_group *g, void **state);
  fl_status (*allreduce)(void *st, void *buf, size_t count, fl_coll_dtype dt);
  fl_status (*broadcast)(void *st, void *buf, size_t bytes, int root); /* root: group index */
  fl_status (*allgather)(void *st, const void *send, size_t bytes, void *recv);
  fl_status (*barrier)(void *st);
  /* The communicator failed: wake this backend's waiters, stop touching
   * the caller's buffers.  Called on the loop thread. */
  void (*abort)(void *st);
  void (*destroy)(void *st);
  /* Optional (NULL where a backend has none): sum over the group, the result
   * copied out on group member root only. */
  fl_status (*reduce)(void *st, void *buf, size_t count, fl_coll_dtype dt, int root);
  /* Optional: from now on run allreduce with algo (COLL_ALGO_*; AUTO: the
   * tuned table).  Called in collective order on every rank. */
  fl_status (*set_algorithm)(void *st, int algo);
  /* Optional: the tuning this rank's allreduce follows, or NULL. */
  const coll_tuning *(*tuning)(void *st);
} coll_backend;

/* The shared-memory transport (shm_xport.c): byte rings between the
 * members of one host's group, placed by the shm backend in its segment.
 * coll_shm_rings_size: bytes the region takes for n members and nch
 * channels (0 out of memory); the region must be 64-byte aligned and
 * zeroed.  attach: the caller keeps region and ranks (n entries) alive
 * and owns *out (coll_shm_rings_free, after the last op).  abort: wake
 * every waiter and fail every later call (any thread). */
typedef struct coll_shm_rings coll_shm_rings;
size_t coll_shm_rings_size(int n, int nch);
fl_status coll_shm_rings_attach(fl_coll *c, void *region, int n, int me, int nch,
                                const int *ranks, coll_shm_rings **out);
const coll_xport *coll_shm_rings_xport(const coll_shm_rings *r);
void coll_shm_rings_abort(coll_shm_rings *r);
void coll_shm_rings_free(coll_shm_rings *r);

extern const coll_backend fl_coll_tcp_backend;
extern const coll_backend fl_coll_shm_backend;
/* Composes shm (inside a node) and tcp (between node leaders) through
 * their coll_backend ops only. */
extern const coll_backend fl_coll_hier_backend;
#ifdef FL_HAVE_NCCL
extern const coll_backend fl_coll_nccl_backend;
/* Rank 0, before the rendezvous: make the NCCL unique id into blob. */
fl_status fl_coll_nccl_make_id(uint8_t *blob, size_t cap, size_t *len);
#endif

/* The transports a job can name (cluster.collective backend), in the order
 * selection walks them (coll.c's transports[], as NCCL's ncclTransports[]):
 * a name picks its row; "auto" takes the first row marked COLL_T_AUTO whose
 * conditions hold.  The hierarchical backend is not a row: with
 * use_hierarchical_allreduce, a row without COLL_T_OWN_HIERARCHY is
 * replaced by it. */
enum {
  COLL_T_AUTO = 1u << 0,           /* "auto" may choose it */
  COLL_T_ONE_HOST = 1u << 1,       /* every rank on one host */
  COLL_T_OWN_HIERARCHY = 1u << 2,  /* builds its own; hierarchical ignored */
  COLL_T_EVEN_ALONE = 1u << 3,     /* runs even with one rank (no local shortcut) */
  COLL_T_NOT_HIER_ALONE = 1u << 4, /* cannot stand for the hierarchy's inter-node part */
};
typedef struct coll_transport {
  const char *name;
  const coll_backend *be; /* NULL: not in this build (`missing` says why) */
  const char *missing;
  unsigned flags;
  /* Rank 0, before the rendezvous: the blob the table carries to every
   * rank (NCCL's unique id), or NULL. */
  fl_status (*make_id)(uint8_t *blob, size_t cap, size_t *len);
} coll_transport;
/* The row named `name`, or NULL. */
const coll_transport *coll_transport_find(const char *name);

/* --------------------------------------------------------- communicator */

typedef struct coll_peer {
  char host[FL_HOST_MAX];
  uint16_t port;
  int node; /* index of its host among the distinct hosts, first-seen order */
  struct sockaddr_storage addr;
  socklen_t addrlen;
} coll_peer;

typedef struct coll_call {
  void (*fn)(fl_coll *c, void *arg);
  void *arg;
  struct coll_call *next;
} coll_call;

typedef struct coll_ctrl_peer {
  coll_conn *conn;
  uint64_t last_seen_ms;
  uint64_t entered;
  uint64_t lag_since_ms; /* 0 = not behind */
  int bye;
} coll_ctrl_peer;

typedef struct coll_claim coll_claim;

struct fl_coll {
  int rank, world;
  int local; /* one rank, no backend: every call is a local no-op */
  double timeout_s, hb_s;
  char token[FL_TOKEN_MAX];
  size_t token_len;
  int nrings;
  size_t chunk;
  int hierarchical, ranks_per_node;
  int gpu; /* nccl's CUDA device, -1 = by node-local index */
  char backend_req[16];
  fl_endpoint *endpoints; /* world, as given */
  coll_peer *peers;       /* world, from the rank table */
  int n_nodes;
  uint64_t session;
  uint8_t blob[256]; /* NCCL unique id from rank 0 */
  size_t blob_len;

  /* loop thread */
  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t tick;
  uv_timer_t retry; /* rendezvous reconnects */
  uv_timer_t suspect; /* grace before blaming a broken data connection */
  int suspect_peer;
  fl_status suspect_st;
  char suspect_msg[256];
  uv_tcp_t listener;
  pthread_t loop_thread;
  int loop_running;
  int listen_fd;
  uint16_t my_port;
  coll_conn *conns;    /* every live connection */
  coll_conn *pending;  /* authenticated data connections, unclaimed */
  coll_claim *claims;  /* backends waiting for a connection */

  /* rendezvous / control (loop thread) */
  int rdv_done;           /* table known (guarded by mu for waiters) */
  fl_status rdv_status;
  uint64_t rdv_deadline_ms;
  int rdv_registered;     /* rank 0: ranks registered, self included */
  coll_ctrl_peer *ctrl;   /* rank 0: one per rank; others: [0] = rank 0 */
  int (*give_up)(void *arg); /* fl_coll_options.give_up: rank 0 asks it before each table */
  void *give_up_arg;
  int bye_sent, bye_done; /* shutdown handshake (mu) */

  /* guarded by mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  coll_call *inbox, *inbox_tail;
  int failed;
  fl_status fail_status;
  int fail_culprit;
  char fail_msg[384];
  int closing; /* destroy in progress: EOFs are expected */
  int loop_stop;

  atomic_uint_fast64_t entered; /* collectives queued by this rank */
  const char *cur_op;           /* name of the collective the worker runs */
  uint64_t cur_seq;

  /* worker */
  pthread_t worker;
  int worker_running;
  fl_coll_req *q_head, *q_tail;
  int worker_stop;
  int exec_busy; /* a collective is running (on the worker or a caller) */

  int algo_req;            /* strategy.allreduce_algorithm (COLL_ALGO_*) */
  uint8_t tuning_in[COLL_TUNING_BYTES]; /* restored from a checkpoint */
  size_t tuning_in_len;    /* 0: none */

  const coll_backend *be;
  void *be_state;
  coll_group world_group;
  char be_name[32];
};

/* Run fn(c, arg) on the loop thread (soon, in posting order).  Any thread.
 * FL_ENOMEM if the call cannot be queued. */
fl_status coll_loop_post(fl_coll *c, void (*fn)(fl_coll *c, void *arg), void *arg);
int coll_on_loop(const fl_coll *c);
uint64_t coll_now_ms(const fl_coll *c); /* loop time (loop thread only) */

/* Fail the communicator: the first call wins, logs one error line
 * ("<op> #<seq>: <message>") and wakes every waiter; rank 0 tells the
 * other ranks, other ranks tell rank 0 (unless `from_verdict`).  culprit is
 * the rank to blame (-1: none).  Any thread. */
void coll_fail(fl_coll *c, int culprit, fl_status st, int from_verdict, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A data connection to `peer` broke.  That peer may have died, or may have
 * closed its connections because it saw another rank fail; so wait a
 * short grace for rank 0's verdict (or the control channel's own
 * evidence) before blaming `peer` with msg.  Loop thread only. */
void coll_suspect(fl_coll *c, int peer, fl_status st, const char *msg);
/* Current failure status (FL_OK when none); takes mu. */
fl_status coll_failed(fl_coll *c);
/* "rank 2 (127.0.0.3:29500)" for messages. */
const char *coll_peer_name(const fl_coll *c, int rank, char *out, size_t cap);

/* Wait on c->cv until *flag (guarded by mu) is non-zero, the communicator
 * failed, or deadline_ms (CLOCK_MONOTONIC ms) passed.  Returns FL_OK when
 * the flag was set, the failure status, or FL_ETIMEDOUT (not logged). */
fl_status coll_wait_flag(fl_coll *c, const int *flag, uint64_t deadline_ms);
/* Same, but a failure does not end the wait (for work the loop must first
 * release); FL_OK when the flag was set, else FL_ETIMEDOUT. */
fl_status coll_wait_flag_only(fl_coll *c, const int *flag, uint64_t deadline_ms);
/* Set *flag = 1 under mu and wake waiters. */
void coll_set_flag(fl_coll *c, int *flag);
uint64_t coll_mono_ms(void);

/* Rendezvous (rendezvous.c): bind/listen (create thread, before the loop
 * runs) and the exchange (on the loop; completion sets rdv_done). */
fl_status coll_listen(fl_coll *c);
fl_status coll_resolve_root(fl_coll *c); /* endpoints[0] -> peers[0].addr */
void coll_rdv_prepare(fl_coll *c); /* before the loop thread starts */
void coll_rdv_start(fl_coll *c, void *unused);
/* Control frames that reach rank 0 or a rank (coll.c). */
void coll_ctrl_frame(coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len);
void coll_ctrl_error(coll_conn *cn, int uverr);
/* Close accepted connections that sent no hello within the timeout. */
void coll_reap_silent(fl_coll *c);
/* Close every connection and the loop's handles (loop thread). */
void coll_close_all(fl_coll *c);

#endif
