/* free_port.h - a free TCP port for a test's or benchmark's daemons.
 *
 * The port is taken below the kernel's ephemeral range
 * (net.ipv4.ip_local_port_range), from half its start up, at a random
 * place: the kernel hands ports of that range to outgoing connections,
 * so a port found by binding port 0 and released could be taken by one
 * of the test's own clients before the daemon binds it.
 * fl_test_free_port never returns a port it returned before in this
 * process (the last 256), which is what a launcher of several daemons
 * needs (tests/integration/free_port.py is the scripts' twin).
 * Header-only: each test program includes it once. */
#ifndef FL_TEST_FREE_PORT_H
#define FL_TEST_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The start of the kernel's ephemeral port range (32768 if unknown). */
static int fl_test_ephemeral_lo(void) {
  int lo = 32768;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%d", &lo) != 1 || lo <= 0) lo = 32768;
    fclose(f);
  }
  return lo;
}

/* Whether port is among the last 256 this process handed out; records
 * it when not. */
static int fl_test_port_given(int port) {
  static int given[256];
  static size_t n_given;
  for (size_t i = 0; i < n_given && i < 256; i++)
    if (given[i] == port) return 1;
  given[n_given++ % 256] = port;
  return 0;
}

/* A port on host (dotted IPv4) that was free a moment ago and is not
 * among the ports this process was handed before; exits the program with
 * a message when none is found. */
static int fl_test_free_port(const char *host) {
  const int lo = fl_test_ephemeral_lo(), first = lo / 2 > 1024 ? lo / 2 : 1024;
  const int span = lo - first;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const unsigned start = ((unsigned)getpid() * 2654435761u ^ (unsigned)now.tv_nsec);
  for (int tried = 0; span > 0 && tried < span; tried++) {
    const int port = first + (int)((start + (unsigned)tried) % (unsigned)span);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
    if (fd >= 0 && inet_pton(AF_INET, host, &a.sin_addr) == 1)
      ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    if (ok && !fl_test_port_given(port)) return port;
  }
  fprintf(stderr, "free port on %s: none found below %d\n", host, lo);
  exit(1);
}

#endif
