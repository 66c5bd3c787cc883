/* rendezvous.c - connections of the collective engine on the libuv loop:
 * the listener, framed control connections, the hello that opens every
 * connection (token check), the rendezvous at rank 0 and the data
 * connections the backends ask for.
 *
 * Rendezvous.  Rank 0 listens at endpoints[0].  Every other rank connects
 * (retrying until collective_timeout_s while rank 0 is not up yet) and
 * sends a REGISTER hello with the token, its rank, the world size and its
 * own data endpoint.  Rank 0 compares the token in constant time; a wrong
 * token, a rank out of range, a second registration of a rank or a late
 * comer is refused with a REJECT frame and a warning naming the peer's
 * address.  When all ranks are in, rank 0 sends every rank the TABLE
 * (session nonce, endpoint of every rank, the NCCL id blob), asking the
 * caller's give_up before each one: a newer elastic round named meanwhile
 * stops the sends and aborts every rank (FL_EAGAIN), those that already
 * hold the table included.  The registration connection stays open as
 * that rank's control channel.
 *
 * Data connections.  A backend asks to connect to a peer for (tag, ring),
 * or to claim the connection a peer opens for (tag, ring).  Both sides
 * present the token and the session in a DATA_HELLO; the acceptor answers
 * ACK once a backend claimed the connection, and the connection then
 * carries raw bytes, read by the backend straight into its buffers. */
#include <config.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "coll_internal.h"

struct coll_claim {
  int peer;
  uint32_t tag, ring;
  coll_data_cb cb;
  void *arg;
  struct coll_claim *next;
};

/* --------------------------------------------------------- conn basics */

static void conn_addr(coll_conn *cn) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  char ip[64] = "?";
  int port = 0;
  if (uv_tcp_getpeername(&cn->tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET) {
      struct sockaddr_in *a = (struct sockaddr_in *)&ss;
      uv_ip4_name(a, ip, sizeof(ip));
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      uv_ip6_name(a, ip, sizeof(ip));
      port = ntohs(a->sin6_port);
    }
  }
  snprintf(cn->peer_addr, sizeof(cn->peer_addr), "%s:%d", ip, port);
}

static coll_conn *conn_new(fl_coll *c) {
  coll_conn *cn = calloc(1, sizeof(*cn));
  if (!cn) return NULL;
  if (uv_tcp_init(&c->loop, &cn->tcp) != 0) {
    free(cn);
    return NULL;
  }
  cn->c = c;
  cn->peer_rank = -1;
  cn->max_frame = COLL_HELLO_MAX;
  cn->born_ms = uv_now(&c->loop);
  snprintf(cn->peer_addr, sizeof(cn->peer_addr), "?");
  cn->all_next = c->conns;
  c->conns = cn;
  return cn;
}

static void conn_unlink(coll_conn *cn) {
  fl_coll *c = cn->c;
  for (coll_conn **pp = &c->conns; *pp; pp = &(*pp)->all_next)
    if (*pp == cn) {
      *pp = cn->all_next;
      break;
    }
  for (coll_conn **pp = &c->pending; *pp; pp = &(*pp)->next)
    if (*pp == cn) {
      *pp = cn->next;
      break;
    }
}

static void conn_closed(uv_handle_t *h) {
  coll_conn *cn = (coll_conn *)h;
  free(cn->owned);
  free(cn->payload);
  free(cn);
}

void coll_conn_close(coll_conn *cn) {
  if (!cn || cn->closing) return;
  cn->closing = 1;
  conn_unlink(cn);
  uv_close((uv_handle_t *)&cn->tcp, conn_closed);
}

static void conn_shutdown_done(uv_shutdown_t *req, int status) {
  (void)status;
  coll_conn *cn = (coll_conn *)req->handle;
  free(req);
  uv_close((uv_handle_t *)&cn->tcp, conn_closed);
}

/* Close once the queued writes are out (a REJECT or BYE_ACK must arrive). */
static void conn_close_after_flush(coll_conn *cn) {
  if (!cn || cn->closing) return;
  cn->closing = 1;
  conn_unlink(cn);
  uv_read_stop((uv_stream_t *)&cn->tcp);
  uv_shutdown_t *req = malloc(sizeof(*req));
  if (!req || uv_shutdown(req, (uv_stream_t *)&cn->tcp, conn_shutdown_done) != 0) {
    free(req);
    uv_close((uv_handle_t *)&cn->tcp, conn_closed);
  }
}

/* ----------------------------------------------------------- framing */

static void frame_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  coll_conn *cn = (coll_conn *)h;
  if (cn->hdr_got < sizeof(cn->hdr))
    *buf = uv_buf_init((char *)cn->hdr + cn->hdr_got, (unsigned)(sizeof(cn->hdr) - cn->hdr_got));
  else
    *buf = uv_buf_init((char *)cn->payload + cn->pgot, (unsigned)(cn->plen - cn->pgot));
}

static void frame_deliver(coll_conn *cn) {
  uint8_t *p = cn->payload;
  uint32_t type = cn->ptype, len = cn->plen;
  cn->payload = NULL;
  cn->hdr_got = 0;
  cn->pgot = 0;
  cn->plen = 0;
  cn->on_frame(cn, type, p, len);
  free(p);
}

static void frame_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  coll_conn *cn = (coll_conn *)s;
  if (nread == 0 || cn->closing) return;
  if (nread < 0) {
    uv_read_stop(s);
    cn->framed = 0;
    cn->on_error(cn, (int)nread);
    return;
  }
  if (cn->hdr_got < sizeof(cn->hdr)) {
    cn->hdr_got += (size_t)nread;
    if (cn->hdr_got < sizeof(cn->hdr)) return;
    cn->ptype = coll_get_u32(cn->hdr);
    cn->plen = coll_get_u32(cn->hdr + 4);
    if (cn->plen > cn->max_frame) {
      uv_read_stop(s);
      cn->framed = 0;
      cn->on_error(cn, UV_EPROTO);
      return;
    }
    cn->payload = cn->plen ? malloc(cn->plen) : calloc(1, 1);
    if (!cn->payload) {
      uv_read_stop(s);
      cn->framed = 0;
      cn->on_error(cn, UV_ENOMEM);
      return;
    }
    cn->pgot = 0;
    if (cn->plen == 0) frame_deliver(cn);
    return;
  }
  cn->pgot += (size_t)nread;
  if (cn->pgot == cn->plen) frame_deliver(cn);
}

int coll_conn_read_frames(coll_conn *cn) {
  cn->framed = 1;
  return uv_read_start((uv_stream_t *)&cn->tcp, frame_alloc, frame_read);
}

void coll_conn_stop_frames(coll_conn *cn) {
  cn->framed = 0;
  uv_read_stop((uv_stream_t *)&cn->tcp);
}

static void frame_written(uv_write_t *req, int status) {
  coll_conn *cn = (coll_conn *)req->handle;
  free(req);
  if (status < 0 && status != UV_ECANCELED && !cn->closing && cn->on_error)
    cn->on_error(cn, status);
}

int coll_conn_send(coll_conn *cn, uint32_t type, const void *p, uint32_t len) {
  if (cn->closing) return UV_ECANCELED;
  uv_write_t *req = malloc(sizeof(uv_write_t) + 8 + len);
  if (!req) return UV_ENOMEM;
  uint8_t *b = (uint8_t *)(req + 1);
  coll_put_u32(b, type);
  coll_put_u32(b + 4, len);
  if (len) memcpy(b + 8, p, len);
  uv_buf_t ub = uv_buf_init((char *)b, 8 + len);
  int rc = uv_write(req, (uv_stream_t *)&cn->tcp, &ub, 1, frame_written);
  if (rc != 0) free(req);
  return rc;
}

static void conn_reject(coll_conn *cn, const char *reason) {
  coll_conn_send(cn, MSG_REJECT, reason, (uint32_t)strlen(reason));
  conn_close_after_flush(cn);
}

/* ------------------------------------------------------------- helpers */

const char *coll_peer_name(const fl_coll *c, int rank, char *out, size_t cap) {
  if (rank < 0 || rank >= c->world) {
    snprintf(out, cap, "rank %d", rank);
    return out;
  }
  const char *host = c->peers && c->peers[rank].host[0] ? c->peers[rank].host
                                                          : c->endpoints[rank].host;
  unsigned port = c->peers && c->peers[rank].port ? c->peers[rank].port : c->endpoints[rank].port;
  if (strchr(host, ':'))
    snprintf(out, cap, "rank %d ([%s]:%u)", rank, host, port);
  else
    snprintf(out, cap, "rank %d (%s:%u)", rank, host, port);
  return out;
}

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  char ps[8];
  snprintf(ps, sizeof(ps), "%u", port);
  int rc = getaddrinfo(host, ps, &hints, &res);
  if (rc != 0 || !res) return rc ? rc : EAI_NONAME;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static void tune_socket(coll_conn *cn) {
  uv_tcp_nodelay(&cn->tcp, 1);
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&cn->tcp, &fd) == 0) {
    int sz = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  }
}

/* ------------------------------------------------------------ listening */

static void on_hello(coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len);

static void hello_error(coll_conn *cn, int uverr) {
  FL_LOGD("collective: connection from %s closed before its hello: %s", cn->peer_addr,
          uv_strerror(uverr));
  coll_conn_close(cn);
}

static void on_accept(uv_stream_t *server, int status) {
  fl_coll *c = server->data;
  if (status < 0) {
    FL_LOGW("collective: rank %d: accept failed: %s", c->rank, uv_strerror(status));
    return;
  }
  coll_conn *cn = conn_new(c);
  if (!cn) return;
  if (uv_accept(server, (uv_stream_t *)&cn->tcp) != 0) {
    coll_conn_close(cn);
    return;
  }
  conn_addr(cn);
  tune_socket(cn);
  cn->on_frame = on_hello;
  cn->on_error = hello_error;
  if (coll_conn_read_frames(cn) != 0) coll_conn_close(cn);
}

fl_status coll_listen(fl_coll *c) {
  char name[FL_HOST_MAX + 16];
  fl_endpoint_format(&c->endpoints[c->rank], name, sizeof(name));
  int rc = uv_tcp_init(&c->loop, &c->listener);
  if (rc != 0) {
    if (c->listen_fd >= 0) close(c->listen_fd);
    c->listen_fd = -1;
    return FL_ERR(FL_EIO, "collective: rank %d: tcp handle: %s", c->rank, uv_strerror(rc));
  }
  c->listener.data = c;
  if (c->listen_fd >= 0) {
    rc = uv_tcp_open(&c->listener, c->listen_fd);
    if (rc != 0) close(c->listen_fd);
    c->listen_fd = -1;
    if (rc != 0)
      return FL_ERR(FL_EIO, "collective: rank %d: cannot use the listening socket for %s: %s",
                    c->rank, name, uv_strerror(rc));
  } else {
    struct sockaddr_storage ss;
    socklen_t len;
    int grc = resolve(c->endpoints[c->rank].host, c->endpoints[c->rank].port, &ss, &len);
    if (grc != 0)
      return FL_ERR(FL_EINVAL, "collective: rank %d: cannot resolve endpoint %s: %s", c->rank,
                    name, gai_strerror(grc));
    rc = uv_tcp_bind(&c->listener, (struct sockaddr *)&ss, 0);
    if (rc != 0)
      return FL_ERR(FL_EIO, "collective: rank %d: cannot bind %s: %s", c->rank, name,
                    uv_strerror(rc));
  }
  rc = uv_listen((uv_stream_t *)&c->listener, 256, on_accept);
  if (rc != 0)
    return FL_ERR(FL_EIO, "collective: rank %d: cannot listen on %s: %s", c->rank, name,
                  uv_strerror(rc));
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  rc = uv_tcp_getsockname(&c->listener, (struct sockaddr *)&ss, &len);
  if (rc != 0)
    return FL_ERR(FL_EIO, "collective: rank %d: getsockname on %s: %s", c->rank, name,
                  uv_strerror(rc));
  c->my_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
  return FL_OK;
}

/* ----------------------------------------------------------- the table */

static fl_status table_apply(fl_coll *c) {
  /* Nodes: distinct hosts, numbered in first-seen rank order. */
  c->n_nodes = 0;
  for (int r = 0; r < c->world; r++) {
    c->peers[r].node = -1;
    for (int q = 0; q < r; q++)
      if (strcmp(c->peers[q].host, c->peers[r].host) == 0) {
        c->peers[r].node = c->peers[q].node;
        break;
      }
    if (c->peers[r].node < 0) c->peers[r].node = c->n_nodes++;
    int grc = resolve(c->peers[r].host, c->peers[r].port, &c->peers[r].addr, &c->peers[r].addrlen);
    if (grc != 0) {
      char nm[FL_HOST_MAX + 32];
      coll_fail(c, r, FL_EINVAL, 1, "cannot resolve the address of %s: %s",
                coll_peer_name(c, r, nm, sizeof(nm)), gai_strerror(grc));
      return FL_EINVAL;
    }
  }
  return FL_OK;
}

static void send_tables(fl_coll *c) {
  size_t cap = 16 + c->blob_len + (size_t)c->world * (4 + FL_HOST_MAX);
  uint8_t *b = malloc(cap);
  if (!b) {
    coll_fail(c, -1, FL_ENOMEM, 0, "rendezvous: out of memory for the rank table");
    return;
  }
  size_t o = 0;
  coll_put_u64(b, c->session);
  coll_put_u32(b + 8, (uint32_t)c->world);
  coll_put_u32(b + 12, (uint32_t)c->blob_len);
  o = 16;
  memcpy(b + o, c->blob, c->blob_len);
  o += c->blob_len;
  for (int r = 0; r < c->world; r++) {
    size_t hl = strlen(c->peers[r].host);
    coll_put_u16(b + o, c->peers[r].port);
    coll_put_u16(b + o + 2, (uint16_t)hl);
    memcpy(b + o + 4, c->peers[r].host, hl);
    o += 4 + hl;
  }
  int r = 1;
  for (; r < c->world && !(c->give_up && c->give_up(c->give_up_arg)); r++)
    coll_conn_send(c->ctrl[r].conn, MSG_TABLE, b, (uint32_t)o);
  free(b);
  if (r < c->world) {
    coll_fail(c, -1, FL_EAGAIN, 1, "rendezvous given up by the caller after %d of %d rank "
              "tables were sent (an elastic trainer whose next world is named)", r - 1,
              c->world - 1);
    return;
  }
  if (table_apply(c) != FL_OK) return;
  FL_LOGI("collective: rank 0: all %d ranks registered (%d node%s)", c->world, c->n_nodes,
          c->n_nodes == 1 ? "" : "s");
  c->rdv_status = FL_OK;
  coll_set_flag(c, &c->rdv_done);
}

static fl_status table_parse(fl_coll *c, const uint8_t *p, uint32_t len) {
  if (len < 16) return FL_EPROTO;
  uint64_t session = coll_get_u64(p);
  uint32_t world = coll_get_u32(p + 8), bl = coll_get_u32(p + 12);
  if ((int)world != c->world || bl > sizeof(c->blob) || 16 + (size_t)bl > len) return FL_EPROTO;
  size_t o = 16;
  memcpy(c->blob, p + o, bl);
  c->blob_len = bl;
  o += bl;
  for (int r = 0; r < c->world; r++) {
    if (o + 4 > len) return FL_EPROTO;
    uint16_t port = coll_get_u16(p + o), hl = coll_get_u16(p + o + 2);
    if (hl >= FL_HOST_MAX || o + 4 + hl > len) return FL_EPROTO;
    c->peers[r].port = port;
    memcpy(c->peers[r].host, p + o + 4, hl);
    c->peers[r].host[hl] = '\0';
    o += 4 + (size_t)hl;
  }
  if (o != len) return FL_EPROTO;
  c->session = session;
  return FL_OK;
}

/* -------------------------------------------------- data connections */

static void claim_deliver(fl_coll *c, coll_conn *cn, coll_data_cb cb, void *arg) {
  coll_conn_stop_frames(cn);
  cn->on_frame = NULL;
  cn->on_error = NULL;
  coll_conn_send(cn, MSG_ACK, NULL, 0);
  cb(c, arg, cn);
}

void coll_claim_data(fl_coll *c, int peer, uint32_t tag, uint32_t ring, coll_data_cb cb,
                     void *arg) {
  for (coll_conn **pp = &c->pending; *pp; pp = &(*pp)->next) {
    coll_conn *cn = *pp;
    if (cn->peer_rank == peer && cn->tag == tag && cn->ring == ring &&
        cn->session == c->session) {
      *pp = cn->next;
      cn->next = NULL;
      claim_deliver(c, cn, cb, arg);
      return;
    }
  }
  coll_claim *cl = calloc(1, sizeof(*cl));
  if (!cl) {
    coll_fail(c, -1, FL_ENOMEM, 0, "out of memory for a connection claim");
    return;
  }
  cl->peer = peer;
  cl->tag = tag;
  cl->ring = ring;
  cl->cb = cb;
  cl->arg = arg;
  cl->next = c->claims;
  c->claims = cl;
}

static void data_hello(fl_coll *c, coll_conn *cn, const coll_hello *h) {
  if (h->rank < 0 || h->rank >= c->world || h->world != c->world) {
    FL_LOGW("collective: rank %d: refused a data connection from %s: rank %d of %d does not "
            "belong to this job of %d",
            c->rank, cn->peer_addr, h->rank, h->world, c->world);
    conn_reject(cn, "rank out of range");
    return;
  }
  if (c->rdv_done && h->session != c->session) {
    FL_LOGW("collective: rank %d: refused a data connection from %s (rank %d): another job's "
            "session",
            c->rank, cn->peer_addr, h->rank);
    conn_reject(cn, "wrong session");
    return;
  }
  cn->peer_rank = h->rank;
  cn->tag = h->tag;
  cn->ring = h->ring;
  cn->session = h->session;
  for (coll_claim **pp = &c->claims; *pp; pp = &(*pp)->next) {
    coll_claim *cl = *pp;
    if (cl->peer == h->rank && cl->tag == h->tag && cl->ring == h->ring &&
        h->session == c->session) {
      *pp = cl->next;
      claim_deliver(c, cn, cl->cb, cl->arg);
      free(cl);
      return;
    }
  }
  cn->on_frame = NULL; /* idle until claimed: no frames expected */
  coll_conn_stop_frames(cn);
  cn->next = c->pending;
  c->pending = cn;
}

typedef struct connect_ctx {
  uv_connect_t req;
  fl_coll *c;
  coll_conn *cn;
  int peer;
  uint32_t tag, ring;
  coll_data_cb cb;
  void *arg;
} connect_ctx;

static void data_client_error(coll_conn *cn, int uverr) {
  fl_coll *c = cn->c;
  connect_ctx *x = cn->owner;
  char nm[FL_HOST_MAX + 32];
  coll_fail(c, x->peer, FL_ECLOSED, 0, "data connection to %s failed before it was accepted: %s",
            coll_peer_name(c, x->peer, nm, sizeof(nm)), uv_strerror(uverr));
  cn->owner = NULL;
  cn->owned = NULL;
  free(x);
  coll_conn_close(cn);
}

static void data_client_frame(coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len) {
  fl_coll *c = cn->c;
  connect_ctx *x = cn->owner;
  char nm[FL_HOST_MAX + 32];
  if (type == MSG_ACK) {
    coll_conn_stop_frames(cn);
    cn->on_frame = NULL;
    cn->on_error = NULL;
    cn->owner = NULL;
    cn->owned = NULL;
    coll_data_cb cb = x->cb;
    void *arg = x->arg;
    free(x);
    cb(c, arg, cn);
    return;
  }
  char why[128];
  snprintf(why, sizeof(why), "%.*s", (int)(len < 100 ? len : 100), (const char *)p);
  coll_fail(c, x->peer, type == MSG_REJECT ? FL_EAUTH : FL_EPROTO, 0,
            "%s refused the data connection: %s", coll_peer_name(c, x->peer, nm, sizeof(nm)),
            type == MSG_REJECT ? why : "unexpected frame");
  cn->owner = NULL;
  cn->owned = NULL;
  free(x);
  coll_conn_close(cn);
}

static void data_connected(uv_connect_t *req, int status) {
  connect_ctx *x = (connect_ctx *)req;
  fl_coll *c = x->c;
  coll_conn *cn = x->cn;
  char nm[FL_HOST_MAX + 32];
  if (status < 0) {
    if (status != UV_ECANCELED)
      coll_fail(c, x->peer, FL_ECLOSED, 0, "cannot connect to %s: %s",
                coll_peer_name(c, x->peer, nm, sizeof(nm)), uv_strerror(status));
    free(x);
    coll_conn_close(cn);
    return;
  }
  conn_addr(cn);
  tune_socket(cn);
  cn->peer_rank = x->peer;
  cn->tag = x->tag;
  cn->ring = x->ring;
  coll_hello h;
  memset(&h, 0, sizeof(h));
  h.magic = COLL_MAGIC;
  h.version = COLL_VERSION;
  h.rank = c->rank;
  h.world = c->world;
  h.session = c->session;
  h.tag = x->tag;
  h.ring = x->ring;
  h.token_len = c->token_len;
  memcpy(h.token, c->token, c->token_len);
  uint8_t b[64 + FL_HOST_MAX + FL_TOKEN_MAX];
  size_t n = coll_hello_encode(&h, b, sizeof(b));
  cn->owner = x;
  cn->owned = x;
  cn->on_frame = data_client_frame;
  cn->on_error = data_client_error;
  if (coll_conn_send(cn, MSG_DATA_HELLO, b, (uint32_t)n) != 0 || coll_conn_read_frames(cn) != 0)
    data_client_error(cn, UV_EIO);
}

void coll_connect_data(fl_coll *c, int peer, uint32_t tag, uint32_t ring, coll_data_cb cb,
                       void *arg) {
  connect_ctx *x = calloc(1, sizeof(*x));
  coll_conn *cn = x ? conn_new(c) : NULL;
  if (!cn) {
    free(x);
    coll_fail(c, -1, FL_ENOMEM, 0, "out of memory for a data connection");
    return;
  }
  x->c = c;
  x->cn = cn;
  x->peer = peer;
  x->tag = tag;
  x->ring = ring;
  x->cb = cb;
  x->arg = arg;
  int rc = uv_tcp_connect(&x->req, &cn->tcp, (struct sockaddr *)&c->peers[peer].addr,
                          data_connected);
  if (rc != 0) {
    char nm[FL_HOST_MAX + 32];
    coll_fail(c, peer, FL_ECLOSED, 0, "cannot connect to %s: %s",
              coll_peer_name(c, peer, nm, sizeof(nm)), uv_strerror(rc));
    free(x);
    coll_conn_close(cn);
  }
}

/* --------------------------------------------------------- the hello */

static void on_hello(coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len) {
  fl_coll *c = cn->c;
  coll_hello h;
  if ((type != MSG_REGISTER && type != MSG_DATA_HELLO) || coll_hello_decode(p, len, &h) != FL_OK ||
      h.magic != COLL_MAGIC) {
    FL_LOGW("collective: rank %d: refused connection from %s: not a Flotilla collective peer",
            c->rank, cn->peer_addr);
    coll_conn_close(cn);
    return;
  }
  if (h.version != COLL_VERSION) {
    FL_LOGW("collective: rank %d: refused connection from %s: protocol version %u, expected %u",
            c->rank, cn->peer_addr, h.version, COLL_VERSION);
    conn_reject(cn, "protocol version mismatch");
    return;
  }
  if (c->token_len > 0 && !coll_token_equal(c->token, c->token_len, h.token, h.token_len)) {
    FL_LOGW("collective: rank %d: refused connection from %s (claiming rank %d): wrong token",
            c->rank, cn->peer_addr, h.rank);
    conn_reject(cn, "wrong token");
    return;
  }
  if (type == MSG_DATA_HELLO) {
    data_hello(c, cn, &h);
    return;
  }
  /* REGISTER: rank 0 only, while the rendezvous is open.  A failed rank
   * 0 closes instead of refusing: the registration is likely a rank of the
   * next elastic round, on the same port, come before this one's teardown
   * (it retries, and finds the next round's rank 0). */
  if (c->rank == 0 && coll_failed(c) != FL_OK) {
    FL_LOGD("collective: rank 0: closed a registration from %s (claiming rank %d): this "
            "communicator failed; a rank of the next round retries", cn->peer_addr, h.rank);
    coll_conn_close(cn);
    return;
  }
  const char *why = NULL;
  if (c->rank != 0)
    why = "this rank is not the rendezvous (rank 0)";
  else if (c->rdv_done)
    why = "the job has already started";
  else if (h.world != c->world)
    why = "world size differs";
  else if (h.rank < 1 || h.rank >= c->world)
    why = "rank out of range";
  else if (c->ctrl[h.rank].conn)
    why = "rank already registered";
  if (why) {
    FL_LOGW("collective: rank 0: refused registration from %s (claiming rank %d of %d): %s",
            cn->peer_addr, h.rank, h.world, why);
    conn_reject(cn, why);
    return;
  }
  cn->peer_rank = h.rank;
  snprintf(c->peers[h.rank].host, FL_HOST_MAX, "%s", h.host);
  c->peers[h.rank].port = h.port;
  c->ctrl[h.rank].conn = cn;
  c->ctrl[h.rank].last_seen_ms = coll_now_ms(c);
  cn->max_frame = COLL_FRAME_MAX;
  cn->on_frame = coll_ctrl_frame;
  cn->on_error = coll_ctrl_error;
  FL_LOGD("collective: rank 0: rank %d registered from %s (data at %s:%u)", h.rank,
          cn->peer_addr, h.host, h.port);
  if (++c->rdv_registered == c->world) send_tables(c);
}

/* --------------------------------------------------------- rendezvous */

static void rdv_connect(fl_coll *c);

static void rdv_retry_cb(uv_timer_t *t) {
  rdv_connect(t->data);
}

static void rdv_later(fl_coll *c, coll_conn *cn, int uverr) {
  if (cn) coll_conn_close(cn);
  c->ctrl[0].conn = NULL;
  char nm[FL_HOST_MAX + 32];
  if (coll_now_ms(c) >= c->rdv_deadline_ms) {
    coll_fail(c, 0, FL_ETIMEDOUT, 1, "rendezvous: cannot reach %s within %.1f s: %s",
              coll_peer_name(c, 0, nm, sizeof(nm)), c->timeout_s, uv_strerror(uverr));
    return;
  }
  uv_timer_start(&c->retry, rdv_retry_cb, 100, 0);
}

static void rdv_client_error(coll_conn *cn, int uverr) {
  fl_coll *c = cn->c;
  if (c->rdv_done) {
    coll_ctrl_error(cn, uverr);
    return;
  }
  /* Rank 0 went away during the exchange: try again until the deadline. */
  rdv_later(c, cn, uverr);
}

static void rdv_client_frame(coll_conn *cn, uint32_t type, const uint8_t *p, uint32_t len) {
  fl_coll *c = cn->c;
  char nm[FL_HOST_MAX + 32];
  if (type == MSG_TABLE) {
    if (table_parse(c, p, len) != FL_OK) {
      coll_fail(c, 0, FL_EPROTO, 1, "rendezvous: malformed rank table from %s",
                coll_peer_name(c, 0, nm, sizeof(nm)));
      return;
    }
    if (table_apply(c) != FL_OK) return;
    cn->on_frame = coll_ctrl_frame;
    cn->on_error = coll_ctrl_error;
    c->ctrl[0].last_seen_ms = coll_now_ms(c);
    c->rdv_status = FL_OK;
    coll_set_flag(c, &c->rdv_done);
    return;
  }
  if (type == MSG_ABORT && len >= 8) {
    fl_status st = (fl_status)(int32_t)coll_get_u32(p + 4);
    if (st >= 0 || st < FL_ESTATE) st = FL_EREMOTE;
    coll_fail(c, (int)coll_get_u32(p), st, 1, "%.*s", (int)(len - 8), (const char *)p + 8);
    return;
  }
  if (type == MSG_REJECT) {
    coll_fail(c, 0, FL_EAUTH, 1, "rendezvous: %s refused rank %d: %.*s",
              coll_peer_name(c, 0, nm, sizeof(nm)), c->rank, (int)(len < 120 ? len : 120),
              (const char *)p);
    return;
  }
  coll_fail(c, 0, FL_EPROTO, 1, "rendezvous: unexpected frame %u from %s", type,
            coll_peer_name(c, 0, nm, sizeof(nm)));
}

static void rdv_connected(uv_connect_t *req, int status) {
  coll_conn *cn = req->data;
  fl_coll *c = cn->c;
  free(req);
  if (status == UV_ECANCELED) return;
  if (status < 0) {
    rdv_later(c, cn, status);
    return;
  }
  conn_addr(cn);
  tune_socket(cn);
  coll_hello h;
  memset(&h, 0, sizeof(h));
  h.magic = COLL_MAGIC;
  h.version = COLL_VERSION;
  h.rank = c->rank;
  h.world = c->world;
  h.port = c->my_port;
  snprintf(h.host, sizeof(h.host), "%s", c->endpoints[c->rank].host);
  h.token_len = c->token_len;
  memcpy(h.token, c->token, c->token_len);
  uint8_t b[64 + FL_HOST_MAX + FL_TOKEN_MAX];
  size_t n = coll_hello_encode(&h, b, sizeof(b));
  cn->on_frame = rdv_client_frame;
  cn->on_error = rdv_client_error;
  int rc = coll_conn_send(cn, MSG_REGISTER, b, (uint32_t)n);
  if (rc == 0) rc = coll_conn_read_frames(cn);
  if (rc != 0) rdv_later(c, cn, rc);
}

static void rdv_connect(fl_coll *c) {
  if (c->failed || c->rdv_done) return;
  coll_conn *cn = conn_new(c);
  uv_connect_t *req = malloc(sizeof(*req));
  if (!cn || !req) {
    free(req);
    if (cn) coll_conn_close(cn);
    coll_fail(c, -1, FL_ENOMEM, 0, "rendezvous: out of memory");
    return;
  }
  cn->peer_rank = 0;
  cn->max_frame = COLL_FRAME_MAX; /* the rank table */
  c->ctrl[0].conn = cn;
  req->data = cn;
  int rc = uv_tcp_connect(req, &cn->tcp, (struct sockaddr *)&c->peers[0].addr, rdv_connected);
  if (rc != 0) {
    free(req);
    rdv_later(c, cn, rc);
  }
}

void coll_rdv_prepare(fl_coll *c) {
  /* Runs before the loop thread starts: registrations may be accepted as
   * soon as it does. */
  uv_update_time(&c->loop);
  /* Other ranks wait a little longer than rank 0, so that rank 0's verdict
   * (naming the missing rank) arrives before their own timeout. */
  double wait_s = c->timeout_s + (c->rank == 0 ? 0.0 : 2.0 * c->hb_s + 1.0);
  c->rdv_deadline_ms = coll_now_ms(c) + (uint64_t)(wait_s * 1000.0);
  c->retry.data = c;
  if (c->rank != 0) return;
  if (getrandom(&c->session, sizeof(c->session), 0) != (ssize_t)sizeof(c->session))
    c->session = (uint64_t)coll_mono_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
  if (c->session == 0) c->session = 1;
  snprintf(c->peers[0].host, FL_HOST_MAX, "%s", c->endpoints[0].host);
  c->peers[0].port = c->my_port;
  c->rdv_registered = 1;
}

void coll_rdv_start(fl_coll *c, void *unused) {
  (void)unused;
  if (c->rank == 0) {
    if (c->world == 1) send_tables(c);
    return;
  }
  /* peers[0].addr was resolved by the creating thread. */
  rdv_connect(c);
}

fl_status coll_resolve_root(fl_coll *c) {
  char nm[FL_HOST_MAX + 16];
  int grc = resolve(c->endpoints[0].host, c->endpoints[0].port, &c->peers[0].addr,
                    &c->peers[0].addrlen);
  if (grc != 0)
    return FL_ERR(FL_EINVAL, "collective: rank %d: cannot resolve the rendezvous endpoint %s: %s",
                  c->rank, fl_endpoint_format(&c->endpoints[0], nm, sizeof(nm)),
                  gai_strerror(grc));
  return FL_OK;
}

void coll_reap_silent(fl_coll *c) {
  uint64_t now = coll_now_ms(c), tmo = (uint64_t)(c->timeout_s * 1000.0);
  coll_conn *cn = c->conns;
  while (cn) {
    coll_conn *next = cn->all_next;
    if (cn->on_frame == on_hello && now - cn->born_ms > tmo) {
      FL_LOGW("collective: rank %d: closed a connection from %s that sent no hello within %.1f s",
              c->rank, cn->peer_addr, c->timeout_s);
      coll_conn_close(cn);
    }
    cn = next;
  }
}

void coll_close_all(fl_coll *c) {
  while (c->claims) {
    coll_claim *cl = c->claims;
    c->claims = cl->next;
    free(cl);
  }
  while (c->conns) conn_close_after_flush(c->conns);
  if (!uv_is_closing((uv_handle_t *)&c->listener)) uv_close((uv_handle_t *)&c->listener, NULL);
}
