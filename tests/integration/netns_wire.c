/* netns_wire.c - a node's link of the namespace harness (netns_lib.sh) as
 * a userspace wire, for kernels without sch_netem: it delays and drops the
 * node's outgoing frames as `tc netem delay D loss L` on the node's eth0
 * would.
 *
 *   netns_wire NODE_NS NODE_IF SWITCH_NS SWITCH_IF DELAY_US LOSS_PPM SEED STATS
 *
 * It makes a TAP device NODE_IF in the namespace NODE_NS (the node's end)
 * and SWITCH_IF in SWITCH_NS (the bridge's end; the caller gives them
 * addresses, MTU 1500 and the bridge), then copies Ethernet frames between
 * them until SIGTERM / SIGINT:
 *   node -> switch: each frame dropped with probability LOSS_PPM / 1e6
 *                   (xorshift64 from SEED), else held DELAY_US microseconds
 *                   (in order; a full queue of 8192 frames drops, as netem's
 *                   limit does);
 *   switch -> node: at once.
 * Both TAPs get a transmit queue of TAP_QLEN frames: with the kernel's
 * default, the TAPs drop whenever the wire falls behind (on a loaded
 * 2-core machine with 16 nodes, each node's two TAPs dropped 500 to 2400
 * frames in one 16 MiB halving-doubling allreduce, 1200 to 11600 at
 * 64 MiB, and TCP retransmitted 100 times more segments than with this
 * queue, while the delay queue below never overflowed).  Frames enter the
 * node's TAP at the link's tbf rate, so TAP_QLEN frames are about 100 ms
 * of a 1 Gbit/s link.
 * Without a loss, both TAPs take whole TCP segments (IFF_VNET_HDR with
 * TSO offload, as a virtual machine's NIC does): the kernel hands the wire
 * one GSO frame of up to 64 KiB where it cut 45 MTU frames before, and the
 * receiving node gets it whole.  The link still runs at tbf's rate and
 * delay; what goes is the per-frame cost on the host, which was what the
 * runs measured: on a 2-core machine with 16 nodes, the 32 wires' reads
 * and writes, the bridge's and the receivers' work for every 1500-byte
 * frame took most of a 64 KiB allreduce's time, as much as the frame count
 * (the ring and halving-doubling move the same bytes), whatever the
 * algorithm's number of steps.  With a loss the frames stay MTU-sized,
 * so that the loss takes one frame at a time, as netem's does.
 * The devices go away with the process (non-persistent TAPs).  Every
 * 100 ms, and at exit, STATS is rewritten (by rename) with one line:
 *   frames_out N lost N overflow N frames_in N delay_us D loss_ppm P
 * (frames: as the TAPs carry them, GSO frames without a loss).
 * Exit 0 on a signal, 1 on a setup error (a message on stderr). */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX (256 << 10)      /* bytes a read may bring: a GSO frame and its header */
#define QBYTES ((size_t)32 << 20) /* bytes the delay queue holds */
#define SLOTS 8192                /* frames the delay queue holds */
#define OFFLOADS (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN)
#define TAP_QLEN 8192 /* frames a TAP's transmit queue holds */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Enter the named network namespace (ip netns: /run/netns/NAME). */
static int enter_ns(const char *name) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/run/netns/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "netns_wire: %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = setns(fd, CLONE_NEWNET);
  if (rc != 0) fprintf(stderr, "netns_wire: setns %s: %s\n", name, strerror(errno));
  close(fd);
  return rc;
}

/* A TAP device named ifname in the current namespace, taking GSO frames
 * behind a virtio-net header when gso; its fd, -1 on error. */
static int open_tap(const char *ifname, int gso) {
  struct ifreq ifr;
  if (strlen(ifname) >= sizeof ifr.ifr_name) {
    fprintf(stderr, "netns_wire: interface name %s too long\n", ifname);
    return -1;
  }
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "netns_wire: /dev/net/tun: %s\n", strerror(errno));
    return -1;
  }
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = (short)(IFF_TAP | IFF_NO_PI | (gso ? IFF_VNET_HDR : 0));
  memcpy(ifr.ifr_name, ifname, strlen(ifname));
  if (ioctl(fd, TUNSETIFF, &ifr) != 0 || (gso && ioctl(fd, TUNSETOFFLOAD, OFFLOADS) != 0)) {
    fprintf(stderr, "netns_wire: TUNSETIFF/TUNSETOFFLOAD %s: %s\n", ifname, strerror(errno));
    close(fd);
    return -1;
  }
  int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifr.ifr_qlen = TAP_QLEN;
  if (sk < 0 || ioctl(sk, SIOCSIFTXQLEN, &ifr) != 0) {
    fprintf(stderr, "netns_wire: transmit queue of %s: %s\n", ifname, strerror(errno));
    if (sk >= 0) close(sk);
    close(fd);
    return -1;
  }
  close(sk);
  return fd;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

typedef struct counters {
  unsigned long long out, lost, overflow, in;
} counters;

static void write_stats(const char *path, const counters *c, long delay_us, long loss_ppm) {
  char tmp[PATH_MAX];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) return;
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "frames_out %llu lost %llu overflow %llu frames_in %llu delay_us %ld loss_ppm %ld\n",
          c->out, c->lost, c->overflow, c->in, delay_us, loss_ppm);
  if (fclose(f) == 0) rename(tmp, path);
}

/* The delay queue: frames in arrival order, their bytes in a ring of
 * QBYTES (a frame that does not fit before the end starts at 0). */
typedef struct queue {
  unsigned char *bytes;
  size_t *off, *len;
  int64_t *due;
  size_t head, count, used_to; /* used_to: the byte after the newest frame */
} queue;

/* Room for len bytes after the newest frame; their offset, or -1. */
static long q_room(const queue *q, size_t len) {
  if (q->count == SLOTS) return -1;
  if (q->count == 0) return 0;
  size_t start = q->off[q->head], end = q->used_to;
  if (end > start) { /* used: [start, end) */
    if (QBYTES - end >= len) return (long)end;
    return start >= len ? 0 : -1;
  }
  return start - end >= len ? (long)end : -1; /* used: [start, QBYTES) and [0, end) */
}

static int q_push(queue *q, const unsigned char *frame, size_t len, int64_t due) {
  long at = q_room(q, len);
  if (at < 0) return -1;
  size_t tail = (q->head + q->count) % SLOTS;
  memcpy(q->bytes + at, frame, len);
  q->off[tail] = (size_t)at;
  q->len[tail] = len;
  q->due[tail] = due;
  q->used_to = (size_t)at + len;
  q->count++;
  return 0;
}

int main(int argc, char **argv) {
  long delay_us, loss_ppm, seed;
  if (argc != 9 || parse_long(argv[5], 0, 10000000, &delay_us) ||
      parse_long(argv[6], 0, 1000000, &loss_ppm) || parse_long(argv[7], 0, LONG_MAX, &seed)) {
    fprintf(stderr, "usage: netns_wire NODE_NS NODE_IF SWITCH_NS SWITCH_IF DELAY_US LOSS_PPM "
                    "SEED STATS\n");
    return 1;
  }
  const char *stats = argv[8];
  int gso = loss_ppm == 0;
  if (enter_ns(argv[1]) != 0) return 1;
  int node = open_tap(argv[2], gso);
  if (node < 0) return 1;
  if (enter_ns(argv[3]) != 0) return 1;
  int sw = open_tap(argv[4], gso);
  if (sw < 0) return 1;

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  queue q = {malloc(QBYTES), malloc(SLOTS * sizeof(size_t)), malloc(SLOTS * sizeof(size_t)),
             malloc(SLOTS * sizeof(int64_t)), 0, 0, 0};
  unsigned char *buf = malloc(FRAME_MAX);
  if (!q.bytes || !q.off || !q.len || !q.due || !buf) {
    fprintf(stderr, "netns_wire: out of memory\n");
    return 1;
  }
  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
  const int64_t delay_ns = (int64_t)delay_us * 1000;
  counters c = {0, 0, 0, 0};
  int64_t next_stats = 0;
  write_stats(stats, &c, delay_us, loss_ppm);

  while (!g_stop) {
    int64_t t = now_ns();
    /* Send what is due. */
    while (q.count && q.due[q.head] <= t) {
      if (write(sw, q.bytes + q.off[q.head], q.len[q.head]) == (ssize_t)q.len[q.head])
        c.out++;
      else
        c.lost++; /* the bridge's end is down (a cut link) */
      q.head = (q.head + 1) % SLOTS;
      q.count--;
    }
    if (t >= next_stats) {
      write_stats(stats, &c, delay_us, loss_ppm);
      next_stats = t + 100000000;
    }
    /* Wait for a frame, the next due time or the next stats update. */
    int64_t wait = next_stats - t;
    if (q.count && q.due[q.head] - t < wait) wait = q.due[q.head] - t;
    if (wait < 0) wait = 0;
    struct timespec ts = {(time_t)(wait / 1000000000), (long)(wait % 1000000000)};
    struct pollfd pf[2] = {{node, POLLIN, 0}, {sw, POLLIN, 0}};
    int n = ppoll(pf, 2, &ts, NULL);
    if (n < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "netns_wire: poll: %s\n", strerror(errno));
      break;
    }
    if (pf[0].revents & (POLLERR | POLLHUP | POLLNVAL) ||
        pf[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      fprintf(stderr, "netns_wire: a TAP device went away\n");
      break;
    }
    /* node -> switch: drop or queue, at most 256 frames a turn. */
    for (int i = 0; i < 256 && (pf[0].revents & POLLIN); i++) {
      ssize_t len = read(node, buf, FRAME_MAX);
      if (len <= 0) break;
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      if ((long)(rng % 1000000) < loss_ppm) {
        c.lost++;
        continue;
      }
      if (q_push(&q, buf, (size_t)len, now_ns() + delay_ns) != 0) c.overflow++;
    }
    /* switch -> node: at once. */
    for (int i = 0; i < 256 && (pf[1].revents & POLLIN); i++) {
      ssize_t len = read(sw, buf, FRAME_MAX);
      if (len <= 0) break;
      if (write(node, buf, (size_t)len) == len) c.in++;
    }
  }
  write_stats(stats, &c, delay_us, loss_ppm);
  free(q.bytes);
  free(q.off);
  free(q.len);
  free(q.due);
  free(buf);
  close(node);
  close(sw);
  return 0;
}
