/* check_timeline.c - unit tests of the Chrome-tracing writer
 * (fl_timeline.h): the file is valid JSON (checked by a small validator
 * here, and by python3's json module when python3 is installed), spans
 * written from several threads balance per thread, odd names are escaped,
 * and a NULL timeline is a no-op. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_timeline.h"

/* ---- a strict JSON validator (RFC 8259 grammar, no extensions) ---- */

static const char *ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static const char *value(const char *p);

static const char *string(const char *p) {
  if (*p++ != '"') return NULL;
  while (*p != '"') {
    if ((unsigned char)*p < 0x20) return NULL;
    if (*p == '\\') {
      p++;
      if (*p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
        p += 4;
      } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
        return NULL;
      }
    }
    p++;
  }
  return p + 1;
}

static const char *number(const char *p) {
  const char *s = p;
  if (*p == '-') p++;
  if (*p == '0')
    p++;
  else if (*p >= '1' && *p <= '9')
    while (*p >= '0' && *p <= '9') p++;
  else
    return NULL;
  if (*p == '.') {
    p++;
    if (!(*p >= '0' && *p <= '9')) return NULL;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!(*p >= '0' && *p <= '9')) return NULL;
    while (*p >= '0' && *p <= '9') p++;
  }
  return p > s ? p : NULL;
}

static const char *container(const char *p, char close, int keyed) {
  p = ws(p + 1);
  if (*p == close) return p + 1;
  for (;;) {
    if (keyed) {
      p = string(ws(p));
      if (!p) return NULL;
      p = ws(p);
      if (*p++ != ':') return NULL;
    }
    p = value(p);
    if (!p) return NULL;
    p = ws(p);
    if (*p == close) return p + 1;
    if (*p++ != ',') return NULL;
  }
}

static const char *value(const char *p) {
  p = ws(p);
  switch (*p) {
  case '{': return container(p, '}', 1);
  case '[': return container(p, ']', 0);
  case '"': return string(p);
  case 't': return strncmp(p, "true", 4) == 0 ? p + 4 : NULL;
  case 'f': return strncmp(p, "false", 5) == 0 ? p + 5 : NULL;
  case 'n': return strncmp(p, "null", 4) == 0 ? p + 4 : NULL;
  default: return number(p);
  }
}

static int json_valid(const char *text) {
  const char *end = value(text);
  return end && *ws(end) == '\0';
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = '\0';
  fclose(f);
  return s;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static int python_ok(void) { return system("python3 -c 'import json' >/dev/null 2>&1") == 0; }

START_TEST(test_validator_itself) {
  ck_assert(json_valid("{\"a\":[1,-2.5e3,true,false,null,\"x\\u00e9\\n\"],\"b\":{}}"));
  ck_assert(!json_valid("{\"a\":[1,]}"));
  ck_assert(!json_valid("{\"a\":NaN}"));
  ck_assert(!json_valid("{\"a\":\"tab\there\"}"));
  ck_assert(!json_valid("{\"a\":1} x"));
  ck_assert(!json_valid("[01]"));
}
END_TEST

typedef struct worker_arg {
  fl_timeline *tl;
  int id;
} worker_arg;

enum { NWORKERS = 3, NSTEPS = 200 };

static void *worker(void *p) {
  worker_arg *a = p;
  char name[32];
  snprintf(name, sizeof name, "comm %d", a->id);
  fl_timeline_thread_name(a->tl, name);
  for (int s = 0; s < NSTEPS; s++) {
    fl_timeline_begin(a->tl, "compute", "forward");
    fl_timeline_end(a->tl, "compute", "forward");
    fl_timeline_begin(a->tl, "compute", "backward");
    int64_t t0 = fl_timeline_now_us();
    /* as a module without a handle would: through the default */
    fl_timeline_span(fl_timeline_default(), "comm", "allreduce bucket 0", t0, t0 + 5, "bytes",
                     1 << 20);
    fl_timeline_end(a->tl, "compute", "backward");
  }
  return NULL;
}

START_TEST(test_threads_valid_json) {
  char path[] = "/tmp/fl_timeline_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  fl_timeline *tl;
  ck_assert_int_eq(fl_timeline_open(path, 2, "trainer \"2\"\n", &tl), FL_OK);
  fl_timeline_set_default(tl);
  ck_assert_ptr_eq(fl_timeline_default(), tl);
  fl_timeline_thread_name(tl, "main");
  pthread_t t[NWORKERS];
  worker_arg args[NWORKERS];
  for (int i = 0; i < NWORKERS; i++) {
    args[i] = (worker_arg){tl, i};
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, &args[i]), 0);
  }
  fl_timeline_counter(tl, "loss", 2.302585);
  fl_timeline_counter(tl, "loss", NAN);
  fl_timeline_begin(tl, "ps", "push \\ \t\x01 odd");
  fl_timeline_end(tl, "ps", "push \\ \t\x01 odd");
  for (int i = 0; i < NWORKERS; i++) pthread_join(t[i], NULL);
  fl_timeline_set_default(NULL);
  ck_assert_int_eq(fl_timeline_close(tl), FL_OK);

  char *text = slurp(path);
  ck_assert_msg(json_valid(text), "timeline is not valid JSON");
  ck_assert_int_eq(count(text, "\"ph\":\"B\""), NWORKERS * NSTEPS * 2 + 1);
  ck_assert_int_eq(count(text, "\"ph\":\"E\""), NWORKERS * NSTEPS * 2 + 1);
  ck_assert_int_eq(count(text, "\"ph\":\"X\""), NWORKERS * NSTEPS);
  ck_assert_int_eq(count(text, "\"pid\":2,"), count(text, "\"ph\":"));
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"trainer \\\"2\\\"\\n\""));
  ck_assert_ptr_nonnull(strstr(text, "push \\\\ \\t\\u0001 odd"));
  ck_assert_ptr_nonnull(strstr(text, "\"args\":{\"value\":null}"));
  free(text);

  if (python_ok()) {
    /* Independent check: python's json module parses it, and the B/E events
     * of every thread nest (each E closes the innermost open B). */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "d=json.load(open(sys.argv[1]))\n"
             "st={}\n"
             "for e in d[\"traceEvents\"]:\n"
             " s=st.setdefault(e[\"tid\"],[])\n"
             " if e[\"ph\"]==\"B\": s.append(e[\"name\"])\n"
             " if e[\"ph\"]==\"E\": assert s.pop()==e[\"name\"]\n"
             "assert all(not s for s in st.values())\n"
             "comm={e[\"tid\"] for e in d[\"traceEvents\"] if e.get(\"cat\")==\"comm\"}\n"
             "be={e[\"tid\"] for e in d[\"traceEvents\"] if e[\"ph\"] in \"BE\"}\n"
             "assert len(comm)==1 and not (comm & be), (comm, be)\n"
             "assert any(e[\"ph\"]==\"M\" and e[\"tid\"] in comm and "
             "e[\"args\"][\"name\"]==\"communication\" for e in d[\"traceEvents\"])\n"
             "assert len(st)==%d' %s",
             NWORKERS + 2, path);
    ck_assert_int_eq(system(cmd), 0);
  } else {
    fprintf(stderr, "check_timeline: python3 not found, cross-check skipped\n");
  }
  unlink(path);
}
END_TEST

START_TEST(test_null_and_errors) {
  fl_timeline_begin(NULL, "c", "n");
  fl_timeline_end(NULL, "c", "n");
  fl_timeline_span(NULL, "c", "n", 0, 1, NULL, 0);
  fl_timeline_counter(NULL, "n", 1);
  fl_timeline_thread_name(NULL, "x");
  ck_assert_int_eq(fl_timeline_close(NULL), FL_OK);
  fl_timeline *tl = NULL;
  ck_assert_ptr_null(fl_timeline_default());
  ck_assert_int_eq(fl_timeline_open("/nonexistent-dir/t.json", 0, "x", &tl), FL_EIO);
  ck_assert_ptr_null(tl);
  /* /dev/full accepts the open and fails the writes: close reports it. */
  if (access("/dev/full", W_OK) == 0) {
    ck_assert_int_eq(fl_timeline_open("/dev/full", 0, "x", &tl), FL_OK);
    for (int i = 0; i < 2000; i++) fl_timeline_begin(tl, "c", "fill the stdio buffer");
    ck_assert_int_eq(fl_timeline_close(tl), FL_EIO);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("timeline");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_validator_itself);
  tcase_add_test(tc, test_threads_valid_json);
  tcase_add_test(tc, test_null_and_errors);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
