/* gpu_bundle_stubs.c - what the GPU bundle (make gpu-bundle) links in place
 * of libsystemd and libmicrohttpd, which Debian ships without a usable
 * static archive (libmicrohttpd.a needs GnuTLS, whose static archive needs
 * p11-kit and libunistring, which have none).  A device run needs neither:
 * sd_notify does what libsystemd's does outside a systemd unit (nothing),
 * and the Prometheus endpoint cannot start (MHD_start_daemon returns NULL,
 * so --metrics_addr fails with the trainer's own error); the other calls
 * are reached only through a started daemon. */
#include <microhttpd.h>
#include <systemd/sd-daemon.h>

/* Returns 0 (no notification socket), as libsystemd does without
 * $NOTIFY_SOCKET; owns nothing. */
int sd_notify(int unset_environment, const char *state) {
  (void)unset_environment;
  (void)state;
  return 0;
}

/* No HTTP daemon in the bundle: always NULL; owns nothing. */
struct MHD_Daemon *MHD_start_daemon(unsigned int flags, uint16_t port,
                                    MHD_AcceptPolicyCallback apc, void *apc_cls,
                                    MHD_AccessHandlerCallback dh, void *dh_cls, ...) {
  (void)flags;
  (void)port;
  (void)apc;
  (void)apc_cls;
  (void)dh;
  (void)dh_cls;
  return NULL;
}

/* Nothing to stop (no daemon ever starts); owns nothing. */
void MHD_stop_daemon(struct MHD_Daemon *daemon) { (void)daemon; }

/* No daemon, no information: NULL; owns nothing. */
const union MHD_DaemonInfo *MHD_get_daemon_info(struct MHD_Daemon *daemon,
                                                enum MHD_DaemonInfoType info_type, ...) {
  (void)daemon;
  (void)info_type;
  return NULL;
}

/* No response objects: NULL; the buffer stays the caller's. */
struct MHD_Response *MHD_create_response_from_buffer(size_t size, void *buffer,
                                                     enum MHD_ResponseMemoryMode mode) {
  (void)size;
  (void)buffer;
  (void)mode;
  return NULL;
}

/* MHD_NO: there is no response to add to; owns nothing. */
enum MHD_Result MHD_add_response_header(struct MHD_Response *response, const char *header,
                                        const char *content) {
  (void)response;
  (void)header;
  (void)content;
  return MHD_NO;
}

/* MHD_NO: there is no connection to answer; owns nothing. */
enum MHD_Result MHD_queue_response(struct MHD_Connection *connection, unsigned int status_code,
                                   struct MHD_Response *response) {
  (void)connection;
  (void)status_code;
  (void)response;
  return MHD_NO;
}

/* Nothing to free (no response is ever made). */
void MHD_destroy_response(struct MHD_Response *response) { (void)response; }
