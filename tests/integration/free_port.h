/* free_port.h - a free TCP port for a test's or benchmark's daemons.
 *
 * The port is found by binding port 0 and releasing it, so the kernel may
 * hand the same port again at once: two ranks of one job given the same
 * endpoint then refuse to start ("appears twice").  fl_test_free_port
 * never returns a port it returned before in this process (the last 256),
 * which is what a launcher of several daemons needs.  Header-only: each
 * test program includes it once. */
#ifndef FL_TEST_FREE_PORT_H
#define FL_TEST_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A port on host (dotted IPv4) that was free a moment ago and is not
 * among the ports this process was handed before; exits the program with
 * a message when none is found. */
static int fl_test_free_port(const char *host) {
  static int given[256];
  static size_t n_given;
  for (int tries = 0; tries < 1000; tries++) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && inet_pton(AF_INET, host, &a.sin_addr) == 1 &&
        bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
      port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    if (port < 0) break;
    int seen = 0;
    for (size_t i = 0; i < n_given && i < 256 && !seen; i++) seen = given[i] == port;
    if (seen) continue;
    given[n_given++ % 256] = port;
    return port;
  }
  fprintf(stderr, "free port on %s: none found\n", host);
  exit(1);
}

#endif
