/* check_metrics.c - unit tests of the Prometheus registry (fl_metrics.h):
 * exposition text, label escaping, histogram buckets, registration rules,
 * thread safety, and the /metrics HTTP endpoint read back over a socket
 * and parsed line by line; fl_obs (the daemons' three calls) and sd_notify
 * (fl_notify.h) through a NOTIFY_SOCKET of our own. */
#include <config.h>

#include <arpa/inet.h>
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fl_metrics.h"
#include "fl_notify.h"
#include "fl_obs.h"
#include "fl_timeline.h"

static char *render(fl_metrics *reg) {
  char *text = NULL;
  size_t len = 0;
  ck_assert_int_eq(fl_metrics_render(reg, &text, &len), FL_OK);
  ck_assert_uint_eq(strlen(text), len);
  return text;
}

START_TEST(test_counter_gauge_text) {
  fl_metrics *reg;
  fl_metric *c, *g;
  ck_assert_int_eq(fl_metrics_create(&reg), FL_OK);
  ck_assert_int_eq(fl_metrics_counter(reg, "x_total", "Things done.", NULL, &c), FL_OK);
  ck_assert_int_eq(fl_metrics_gauge(reg, "y", "Level\nwith \\ newline.", "op,peer", &g),
                   FL_OK);
  fl_series *cs = fl_metric_plain(c);
  fl_series_add(cs, 2);
  fl_series_add(cs, 0.5);
  fl_series_add(cs, -7); /* counters never go down */
  fl_series_set(cs, 100); /* not a gauge: ignored */
  fl_series *g1, *g2;
  const char *v1[] = {"push", "a\"b\\c\nd"};
  const char *v2[] = {"pull", "0"};
  ck_assert_int_eq(fl_metric_series(g, v1, &g1), FL_OK);
  ck_assert_int_eq(fl_metric_series(g, v2, &g2), FL_OK);
  fl_series *again;
  ck_assert_int_eq(fl_metric_series(g, v1, &again), FL_OK);
  ck_assert_ptr_eq(again, g1);
  fl_series_set(g1, 1e300);
  fl_series_add(g2, -0.25);
  fl_series_set(NULL, 1); /* NULL is a no-op */
  ck_assert_double_eq(fl_series_value(cs, NULL), 2.5);
  ck_assert_ptr_null(fl_metric_plain(g)); /* has labels */

  char *text = render(reg);
  const char *want = "# HELP x_total Things done.\n"
                     "# TYPE x_total counter\n"
                     "x_total 2.5\n"
                     "# HELP y Level\\nwith \\\\ newline.\n"
                     "# TYPE y gauge\n"
                     "y{op=\"push\",peer=\"a\\\"b\\\\c\\nd\"} 1e+300\n"
                     "y{op=\"pull\",peer=\"0\"} -0.25\n";
  ck_assert_str_eq(text, want);
  free(text);
  fl_metrics_destroy(reg);
}
END_TEST

START_TEST(test_histogram_buckets) {
  fl_metrics *reg;
  fl_metric *h;
  const double bounds[] = {0.25, 1, 10};
  ck_assert_int_eq(fl_metrics_create(&reg), FL_OK);
  ck_assert_int_eq(fl_metrics_histogram(reg, "lat_seconds", "Latency.", "op", bounds, 3, &h),
                   FL_OK);
  fl_series *s;
  const char *v[] = {"push"};
  ck_assert_int_eq(fl_metric_series(h, v, &s), FL_OK);
  const double obs[] = {0.125, 0.25, 0.5, 5, 10, 11, 1000}; /* exact in binary */
  double sum = 0;
  for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++) {
    fl_series_observe(s, obs[i]);
    sum += obs[i];
  }
  fl_series_add(s, 3); /* not a counter: ignored */
  double count;
  ck_assert_double_eq(fl_series_value(s, &count), sum);
  ck_assert_double_eq(count, 7);
  char *text = render(reg);
  ck_assert_double_eq(sum, 1026.875);
  /* A bound equal to the observation belongs to that bucket (le = "<="). */
  const char *want =
           "# HELP lat_seconds Latency.\n"
           "# TYPE lat_seconds histogram\n"
           "lat_seconds_bucket{op=\"push\",le=\"0.25\"} 2\n"
           "lat_seconds_bucket{op=\"push\",le=\"1\"} 3\n"
           "lat_seconds_bucket{op=\"push\",le=\"10\"} 5\n"
           "lat_seconds_bucket{op=\"push\",le=\"+Inf\"} 7\n"
           "lat_seconds_sum{op=\"push\"} 1026.875\n"
           "lat_seconds_count{op=\"push\"} 7\n";
  ck_assert_str_eq(text, want);
  free(text);
  fl_metrics_destroy(reg);
}
END_TEST

START_TEST(test_registration_rules) {
  fl_metrics *reg;
  fl_metric *a, *b;
  ck_assert_int_eq(fl_metrics_create(&reg), FL_OK);
  ck_assert_int_eq(fl_metrics_counter(reg, "a_total", "A.", "x", &a), FL_OK);
  ck_assert_int_eq(fl_metrics_counter(reg, "a_total", "A again.", "x", &b), FL_OK);
  ck_assert_ptr_eq(a, b);
  ck_assert_int_eq(fl_metrics_gauge(reg, "a_total", "A.", "x", &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_counter(reg, "a_total", "A.", "y", &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_counter(reg, "9bad", "", NULL, &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_counter(reg, "bad-name", "", NULL, &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_counter(reg, "ok:name_1", "", "l1,__x", &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_counter(reg, "ok:name_1", "", "l1,l1", &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_counter(reg, "ok:name_1", "", "a,b,c,d,e", &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_histogram(reg, "h", "", "le", NULL, 0, &b), FL_EINVAL);
  const double down[] = {1, 0.5};
  ck_assert_int_eq(fl_metrics_histogram(reg, "h", "", NULL, down, 2, &b), FL_EINVAL);
  const double inf[] = {1, INFINITY};
  ck_assert_int_eq(fl_metrics_histogram(reg, "h", "", NULL, inf, 2, &b), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_histogram(reg, "h", "", NULL, NULL, 0, &b), FL_OK);
  fl_series *s;
  ck_assert_int_eq(fl_metric_series(a, NULL, &s), FL_EINVAL); /* needs a value for x */
  const char *nullv[] = {NULL};
  ck_assert_int_eq(fl_metric_series(a, nullv, &s), FL_EINVAL);
  /* Only the valid families were kept. */
  char *text = render(reg);
  ck_assert_ptr_nonnull(strstr(text, "# TYPE a_total counter\n"));
  ck_assert_ptr_nonnull(strstr(text, "# TYPE h histogram\n"));
  ck_assert_ptr_null(strstr(text, "ok:name_1"));
  free(text);
  fl_metrics_destroy(reg);
}
END_TEST

enum { NTHREADS = 4, NADDS = 20000 };

static void *adder(void *arg) {
  fl_series **s = arg;
  for (int i = 0; i < NADDS; i++) {
    fl_series_add(s[0], 1);
    fl_series_observe(s[1], (double)(i % 3));
  }
  return NULL;
}

START_TEST(test_threads) {
  fl_metrics *reg;
  fl_metric *c, *h;
  const double bounds[] = {0.5, 1.5};
  ck_assert_int_eq(fl_metrics_create(&reg), FL_OK);
  ck_assert_int_eq(fl_metrics_counter(reg, "n_total", "", NULL, &c), FL_OK);
  ck_assert_int_eq(fl_metrics_histogram(reg, "v", "", NULL, bounds, 2, &h), FL_OK);
  fl_series *s[2] = {fl_metric_plain(c), fl_metric_plain(h)};
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, adder, s), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  double count;
  ck_assert_double_eq(fl_series_value(s[0], NULL), NTHREADS * NADDS);
  fl_series_value(s[1], &count);
  ck_assert_double_eq(count, NTHREADS * NADDS);
  char *text = render(reg);
  /* i % 3 over 20000 values: 6667 zeros, 6667 ones, 6666 twos per thread. */
  char want[128];
  snprintf(want, sizeof want, "v_bucket{le=\"0.5\"} %d\nv_bucket{le=\"1.5\"} %d\n",
           NTHREADS * 6667, NTHREADS * 13334);
  ck_assert_ptr_nonnull(strstr(text, want));
  free(text);
  fl_metrics_destroy(reg);
}
END_TEST

START_TEST(test_std_metrics) {
  const fl_std_metrics *m = fl_metrics_std();
  ck_assert_ptr_eq(m, fl_metrics_std());
  ck_assert_ptr_nonnull(m->steps);
  ck_assert_ptr_nonnull(m->allreduce_seconds);
  ck_assert_int_eq(fl_metrics_std_info("trainer", 3, "collective"), FL_OK);
  fl_series_add(m->steps, 1);
  fl_series_observe(m->push_seconds, 0.003);
  fl_series_add(m->bytes_sent, 4096);
  fl_series *rows;
  const char *t[] = {"emb"};
  ck_assert_int_eq(fl_metric_series(m->table_rows, t, &rows), FL_OK);
  fl_series_set(rows, 12);
  char *text = render(fl_metrics_default());
  ck_assert_ptr_nonnull(
      strstr(text, "flotilla_info{role=\"trainer\",rank=\"3\",mode=\"collective\"} 1\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nflotilla_steps_total 1\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nflotilla_push_seconds_bucket{le=\"0.005\"} 1\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nflotilla_push_seconds_bucket{le=\"0.0025\"} 0\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nflotilla_bytes_sent_total 4096\n"));
  /* a trainer does not show the pserver's families */
  ck_assert_ptr_null(strstr(text, "flotilla_table_rows"));
  ck_assert_ptr_null(strstr(text, "flotilla_live_trainers"));
  free(text);
  /* and a pserver not the trainer's */
  ck_assert_int_eq(fl_metrics_std_info("pserver", 0, "ps-sync"), FL_OK);
  text = render(fl_metrics_default());
  ck_assert_ptr_nonnull(strstr(text, "\nflotilla_table_rows{table=\"emb\"} 12\n"));
  ck_assert_ptr_nonnull(strstr(text, "# TYPE flotilla_live_trainers gauge\n"));
  ck_assert_ptr_null(strstr(text, "flotilla_steps_total"));
  ck_assert_ptr_null(strstr(text, "flotilla_push_seconds"));
  ck_assert_ptr_nonnull(strstr(text, "\nflotilla_bytes_sent_total 4096\n"));
  free(text);
}
END_TEST

/* ---- HTTP ---- */

/* One HTTP/1.0 request to 127.0.0.1:port; returns the whole response. */
static char *http(int port, const char *request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(write(fd, request, strlen(request)), (ssize_t)strlen(request));
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  ssize_t n;
  while ((n = read(fd, out + len, cap - len - 1)) > 0) {
    len += (size_t)n;
    if (len + 1 == cap) out = realloc(out, cap *= 2);
  }
  out[len] = '\0';
  close(fd);
  return out;
}

/* Parse the exposition text as a scraper would: every line is a comment
 * (# HELP / # TYPE) or `name[{k="v",...}] value`.  Returns the number of
 * samples, or -1 on the first malformed line. */
static int parse_exposition(const char *text) {
  int samples = 0;
  const char *p = text;
  while (*p) {
    const char *eol = strchr(p, '\n');
    if (!eol) return -1; /* every line ends with \n */
    if (*p == '#') {
      if (strncmp(p, "# HELP ", 7) != 0 && strncmp(p, "# TYPE ", 7) != 0) return -1;
    } else {
      const char *q = p;
      while (q < eol && *q != '{' && *q != ' ') q++;
      if (q == p) return -1;
      if (*q == '{') {
        q++;
        while (*q != '}') {
          while (*q != '=' && q < eol) q++;
          if (q[0] != '=' || q[1] != '"') return -1;
          q += 2;
          while (*q != '"' && q < eol) q += (*q == '\\') ? 2 : 1;
          if (*q != '"') return -1;
          q++;
          if (*q == ',') q++;
          else if (*q != '}') return -1;
        }
        q++;
      }
      if (*q != ' ') return -1;
      char *end;
      const char *num = q + 1;
      if (strncmp(num, "+Inf", 4) != 0 && strncmp(num, "NaN", 3) != 0) {
        strtod(num, &end);
        if (end != eol) return -1;
      }
      samples++;
    }
    p = eol + 1;
  }
  return samples;
}

START_TEST(test_http_endpoint) {
  fl_metrics *reg;
  fl_metric *c, *h;
  fl_metrics_server *srv;
  ck_assert_int_eq(fl_metrics_create(&reg), FL_OK);
  ck_assert_int_eq(fl_metrics_counter(reg, "req_total", "Requests.", "path", &c), FL_OK);
  ck_assert_int_eq(fl_metrics_histogram(reg, "d_seconds", "D.", NULL, NULL, 0, &h), FL_OK);
  fl_series *s;
  const char *v[] = {"/a \"quoted\""};
  ck_assert_int_eq(fl_metric_series(c, v, &s), FL_OK);
  fl_series_add(s, 41);
  fl_series_add(s, 1);
  fl_series_observe(fl_metric_plain(h), 0.02);

  ck_assert_int_eq(fl_metrics_serve(reg, "127.0.0.1:0", &srv), FL_OK);
  int port = fl_metrics_server_port(srv);
  ck_assert_int_gt(port, 0);

  char *resp = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  ck_assert_msg(strncmp(resp, "HTTP/1.0 200", 12) == 0 || strncmp(resp, "HTTP/1.1 200", 12) == 0,
                "status line: %.40s", resp);
  ck_assert_ptr_nonnull(strstr(resp, "text/plain; version=0.0.4"));
  char *body = strstr(resp, "\r\n\r\n");
  ck_assert_ptr_nonnull(body);
  body += 4;
  /* 1 counter sample + 16 default buckets + +Inf + _sum + _count. */
  ck_assert_int_eq(parse_exposition(body), 1 + 16 + 3);
  ck_assert_ptr_nonnull(strstr(body, "req_total{path=\"/a \\\"quoted\\\"\"} 42\n"));
  ck_assert_ptr_nonnull(strstr(body, "d_seconds_bucket{le=\"0.025\"} 1\n"));
  free(resp);

  resp = http(port, "GET /other HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(resp, " 404 "));
  free(resp);
  /* /healthz: alive; /readyz: 503 until the process says it is ready */
  resp = http(port, "GET /healthz HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(resp, " 200 "));
  free(resp);
  fl_metrics_set_ready(0);
  resp = http(port, "GET /readyz HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(resp, " 503 "));
  free(resp);
  fl_metrics_set_ready(1);
  resp = http(port, "GET /readyz HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(resp, " 200 "));
  free(resp);
  resp = http(port, "DELETE /metrics HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(resp, " 405 "));
  free(resp);

  /* The same address cannot be bound twice; bad addresses are refused. */
  char addr[32];
  fl_metrics_server *dup;
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  ck_assert_int_eq(fl_metrics_serve(reg, addr, &dup), FL_EIO);
  ck_assert_int_eq(fl_metrics_serve(reg, "127.0.0.1", &dup), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_serve(reg, "127.0.0.1:99999", &dup), FL_EINVAL);
  ck_assert_int_eq(fl_metrics_serve(reg, "[::1:0", &dup), FL_EINVAL);

  fl_metrics_server_stop(srv);
  fl_metrics_destroy(reg);
}
END_TEST

START_TEST(test_obs) {
  fl_obs *o;
  char path[] = "/tmp/fl_obs_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  double steps0 = fl_series_value(fl_metrics_std()->steps, NULL);
  ck_assert_int_eq(fl_obs_start("trainer", 1, "ps", "127.0.0.1:0", path, &o), FL_OK);
  ck_assert_ptr_nonnull(fl_timeline_default());
  int port = fl_obs_metrics_port(o);
  ck_assert_int_gt(port, 0);
  for (int i = 0; i < 3; i++) fl_obs_step(o, 0.5 - 0.1 * i, 1024, 64);
  ck_assert_double_eq(fl_series_value(fl_metrics_std()->steps, NULL), steps0 + 3);
  char *resp = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  char *body = strstr(resp, "\r\n\r\n");
  ck_assert_ptr_nonnull(body);
  ck_assert_int_gt(parse_exposition(body + 4), 10);
  ck_assert_ptr_nonnull(strstr(body, "flotilla_info{role=\"trainer\",rank=\"1\",mode=\"ps\"} 1\n"));
  ck_assert_ptr_nonnull(strstr(body, "\nflotilla_loss 0.3\n"));
  ck_assert_ptr_nonnull(strstr(body, "\nflotilla_loss_scale 1024\n"));
  free(resp);
  ck_assert_int_eq(fl_obs_stop(o), FL_OK);
  ck_assert_ptr_null(fl_timeline_default());
  FILE *f = fopen(path, "r");
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "\"name\":\"trainer 1\""));
  ck_assert_ptr_nonnull(strstr(buf, "\"ph\":\"C\""));
  ck_assert_ptr_nonnull(strstr(buf, "]}\n"));
  unlink(path);
  /* A bad address is refused and leaves nothing behind. */
  ck_assert_int_eq(fl_obs_start("trainer", 0, "local", "nohost", NULL, &o), FL_EINVAL);
  ck_assert_int_eq(fl_obs_stop(NULL), FL_OK);
}
END_TEST

/* sd_notify reaches the socket systemd names in NOTIFY_SOCKET; without
 * one every call is a no-op. */
START_TEST(test_notify) {
  unsetenv("NOTIFY_SOCKET");
  ck_assert_int_eq(fl_notify_ready(NULL), FL_OK);
  char path[] = "/tmp/fl_notify_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(path));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", path);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  setenv("NOTIFY_SOCKET", sa.sun_path, 1);
  char buf[256];
  ck_assert_int_eq(fl_notify_ready("serving 127.0.0.1:6170\nstep 0"), FL_OK);
  ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
  ck_assert_int_gt(n, 0);
  buf[n] = '\0';
  ck_assert_str_eq(buf, "READY=1\nSTATUS=serving 127.0.0.1:6170 step 0");
  ck_assert_int_eq(fl_notify_stopping(), FL_OK);
  n = recv(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  ck_assert_str_eq(buf, "STOPPING=1");
  ck_assert_int_eq(fl_notify_status("checkpoint 3"), FL_OK);
  n = recv(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  ck_assert_str_eq(buf, "STATUS=checkpoint 3");
  /* A socket that is gone: the daemon hears about it. */
  close(fd);
  unlink(sa.sun_path);
  ck_assert_int_eq(fl_notify_ready(NULL), FL_EIO);
  unsetenv("NOTIFY_SOCKET");
  rmdir(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_counter_gauge_text);
  tcase_add_test(tc, test_histogram_buckets);
  tcase_add_test(tc, test_registration_rules);
  tcase_add_test(tc, test_threads);
  tcase_add_test(tc, test_std_metrics);
  tcase_add_test(tc, test_http_endpoint);
  tcase_add_test(tc, test_obs);
  tcase_add_test(tc, test_notify);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
