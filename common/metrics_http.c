/* metrics_http.c - the /metrics HTTP endpoint (fl_metrics_serve).
 *
 * libmicrohttpd runs the listener on its own internal thread; each GET
 * /metrics renders the registry afresh.  /healthz answers 200 while the
 * process serves at all; /readyz 200 once it has joined its job
 * (fl_metrics_set_ready: the daemons' fl_notify_ready), 503 before.  Only
 * GET and HEAD of these are answered (404 elsewhere, 405 for other
 * methods), request bodies are refused, and the daemon binds exactly the
 * address it is given. */
#include <config.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "fl_log.h"
#include "fl_metrics.h"

struct fl_metrics_server {
  struct MHD_Daemon *daemon;
  fl_metrics *reg;
  int port;
  char addr[128];
};

static atomic_int g_ready;

void fl_metrics_set_ready(int ready) { atomic_store(&g_ready, ready != 0); }

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  const fl_metrics_server *srv = cls;
  char msg[256];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') msg[--n] = '\0';
  FL_LOGW("metrics %s: %s", srv->addr, msg);
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code,
                                  const char *text) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, "Allow", "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size,
                              void **con_cls) {
  fl_metrics_server *srv = cls;
  (void)version;
  (void)upload_data;
  (void)con_cls;
  if (*upload_data_size != 0) return reply_text(c, MHD_HTTP_BAD_REQUEST, "no body expected\n");
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
    return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
  if (strcmp(url, "/healthz") == 0) return reply_text(c, MHD_HTTP_OK, "ok\n");
  if (strcmp(url, "/readyz") == 0)
    return atomic_load(&g_ready) ? reply_text(c, MHD_HTTP_OK, "ready\n")
                                 : reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready\n");
  if (strcmp(url, "/metrics") != 0)
    return reply_text(c, MHD_HTTP_NOT_FOUND, "see /metrics, /healthz, /readyz\n");

  char *text = NULL;
  size_t len = 0;
  if (fl_metrics_render(srv->reg, &text, &len) != FL_OK)
    return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
  struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/plain; version=0.0.4; charset=utf-8");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

/* Split "host:port" or "[v6]:port" into host and port strings. */
static fl_status split_addr(const char *addr, char *host, size_t hn, char *port, size_t pn) {
  const char *h = addr, *colon;
  size_t hl;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close || close[1] != ':') goto bad;
    h = addr + 1;
    hl = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon) goto bad;
    hl = (size_t)(colon - addr);
  }
  if (hl == 0 || hl >= hn || strlen(colon + 1) == 0 || strlen(colon + 1) >= pn) goto bad;
  memcpy(host, h, hl);
  host[hl] = '\0';
  strcpy(port, colon + 1);
  for (const char *p = port; *p; p++)
    if (*p < '0' || *p > '9') goto bad;
  if (atoi(port) > 65535) goto bad;
  return FL_OK;
bad:
  return FL_ERR(FL_EINVAL, "metrics: bad address \"%s\" (want host:port or [v6]:port)", addr);
}

fl_status fl_metrics_serve(fl_metrics *reg, const char *addr, fl_metrics_server **out) {
  char host[96], port[8];
  struct addrinfo hints, *ai = NULL;
  fl_status st;
  if (!reg || !addr) return FL_ERR(FL_EINVAL, "metrics: serve needs a registry and an address");
  FL_TRY(split_addr(addr, host, sizeof host, port, sizeof port));

  fl_metrics_server *srv = calloc(1, sizeof *srv);
  if (!srv) return FL_ERR(FL_ENOMEM, "metrics %s: out of memory", addr);
  srv->reg = reg;
  snprintf(srv->addr, sizeof srv->addr, "%s", addr);

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai != 0) {
    st = FL_ERR(FL_EINVAL, "metrics: cannot resolve \"%s\": %s", host, gai_strerror(gai));
    goto fail;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  srv->daemon = MHD_start_daemon(flags, (uint16_t)atoi(port), NULL, NULL, handle, srv,
                                 /* the logger first: MHD warns otherwise */
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                                 MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!srv->daemon) {
    st = FL_ERR(FL_EIO, "metrics: cannot listen on %s (address in use or not local?)", addr);
    goto fail;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
  srv->port = info ? info->port : atoi(port);
  *out = srv;
  return FL_OK;
fail:
  free(srv);
  return st;
}

int fl_metrics_server_port(const fl_metrics_server *srv) { return srv ? srv->port : 0; }

void fl_metrics_server_stop(fl_metrics_server *srv) {
  if (!srv) return;
  MHD_stop_daemon(srv->daemon);
  free(srv);
}
