/* test_cluster.c - FLOTILLA_* parsing, flag overrides, validation errors,
 * node grouping by host, token loading, and the "Distributed Envs" table. */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_cluster.h"
#include "fl_log.h"

extern char **environ;

static void clear_env(void) {
  for (int again = 1; again;) {
    again = 0;
    for (char **e = environ; *e; e++) {
      if (strncmp(*e, "FLOTILLA_", 9) || !strncmp(*e, "FLOTILLA_LOG_LEVEL", 18)) continue;
      char name[128];
      size_t n = strcspn(*e, "=");
      snprintf(name, sizeof name, "%.*s", (int)n, *e);
      unsetenv(name);
      again = 1;
      break;
    }
  }
}

static void quiet(void) { fl_log_set_level(FL_LOG_OFF); }

START_TEST(test_env) {
  fl_cluster c;
  clear_env();
  ck_assert_int_eq(fl_cluster_from_env(&c), FL_OK);
  ck_assert_int_eq(c.role, FL_ROLE_TRAINER);
  ck_assert_int_eq(c.trainers_num, 1);
  ck_assert_int_eq(c.mode_set, 0);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_OK);
  ck_assert_int_eq(c.mode, FL_MODE_LOCAL);

  setenv("FLOTILLA_ROLE", "trainer", 1);
  setenv("FLOTILLA_MODE", "collective", 1);
  setenv("FLOTILLA_TRAINER_ID", "2", 1);
  setenv("FLOTILLA_TRAINERS_NUM", "4", 1);
  setenv("FLOTILLA_TRAINER_ENDPOINTS",
         "127.0.0.2:6170, 127.0.0.2:6171,127.0.0.3:6170 ,[::1]:6172", 1);
  setenv("FLOTILLA_CURRENT_ENDPOINT", "127.0.0.3:6170", 1);
  setenv("FLOTILLA_SELECTED_GPUS", "0, 3", 1);
  setenv("FLOTILLA_TOKEN", "  s3cret-token\n", 1);
  setenv("FLOTILLA_LOG_DIR", "/tmp/log", 1);
  setenv("FLOTILLA_CHECKPOINT_DIR", "/tmp/ck", 1);
  ck_assert_int_eq(fl_cluster_from_env(&c), FL_OK);
  ck_assert_int_eq(c.mode, FL_MODE_COLLECTIVE);
  ck_assert_int_eq(c.mode_set, 1);
  ck_assert_int_eq(c.trainer_id, 2);
  ck_assert_int_eq(c.trainers_num, 4);
  ck_assert_int_eq(c.n_trainer_endpoints, 4);
  ck_assert_str_eq(c.trainer_endpoints[1].host, "127.0.0.2");
  ck_assert_uint_eq(c.trainer_endpoints[1].port, 6171);
  ck_assert_str_eq(c.trainer_endpoints[3].host, "::1");
  ck_assert_uint_eq(c.trainer_endpoints[3].port, 6172);
  ck_assert_int_eq(c.n_selected_gpus, 2);
  ck_assert_int_eq(c.selected_gpus[1], 3);
  ck_assert_str_eq(c.token, "s3cret-token");
  ck_assert_str_eq(c.log_dir, "/tmp/log");
  ck_assert_str_eq(c.checkpoint_dir, "/tmp/ck");
  /* the job's mode does not override the environment's */
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_OK);
  ck_assert_int_eq(c.mode, FL_MODE_COLLECTIVE);

  int node, lr, ls;
  ck_assert_int_eq(fl_cluster_local(&c, &node, &lr, &ls), FL_OK);
  ck_assert_int_eq(node, 1);
  ck_assert_int_eq(lr, 0);
  ck_assert_int_eq(ls, 1);
  setenv("FLOTILLA_LOCAL_RANK", "1", 1);
  setenv("FLOTILLA_LOCAL_SIZE", "2", 1);
  ck_assert_int_eq(fl_cluster_from_env(&c), FL_OK);
  ck_assert_int_eq(fl_cluster_local(&c, &node, &lr, &ls), FL_OK);
  ck_assert_int_eq(lr, 1);
  ck_assert_int_eq(ls, 2);

  /* PS mode, a pserver */
  clear_env();
  setenv("FLOTILLA_ROLE", "PSERVER", 1);
  setenv("FLOTILLA_PSERVERS_IP_PORT_LIST", "127.0.0.1:7000,127.0.0.1:7001", 1);
  setenv("FLOTILLA_PSERVER_ID", "1", 1);
  setenv("FLOTILLA_TRAINERS_NUM", "2", 1);
  ck_assert_int_eq(fl_cluster_from_env(&c), FL_OK);
  ck_assert_int_eq(c.role, FL_ROLE_PSERVER);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_PS), FL_OK);
  ck_assert_int_eq(c.has_current_endpoint, 2); /* derived */
  ck_assert_uint_eq(c.current_endpoint.port, 7001);
  clear_env();
}
END_TEST

/* from_env must fail with FL_EINVAL for VAR=value. */
static void bad_env(const char *var, const char *value) {
  fl_cluster c;
  clear_env();
  setenv(var, value, 1);
  ck_assert_msg(fl_cluster_from_env(&c) == FL_EINVAL, "%s=%s accepted", var, value);
  unsetenv(var);
}

START_TEST(test_env_errors) {
  quiet();
  bad_env("FLOTILLA_TRAINER_ID", "abc");
  bad_env("FLOTILLA_TRAINER_ID", "-1");
  bad_env("FLOTILLA_TRAINER_ID", "1x");
  bad_env("FLOTILLA_TRAINERS_NUM", "0");
  bad_env("FLOTILLA_TRAINERS_NUM", "100000");
  bad_env("FLOTILLA_ROLE", "WORKER");
  bad_env("FLOTILLA_MODE", "nccl");
  bad_env("FLOTILLA_TRAINER_ENDPOINTS", "127.0.0.1");
  bad_env("FLOTILLA_TRAINER_ENDPOINTS", "127.0.0.1:0");
  bad_env("FLOTILLA_TRAINER_ENDPOINTS", "127.0.0.1:65536");
  bad_env("FLOTILLA_TRAINER_ENDPOINTS", "127.0.0.1:80,,127.0.0.1:81");
  bad_env("FLOTILLA_TRAINER_ENDPOINTS", "::1:80");
  bad_env("FLOTILLA_TRAINER_ENDPOINTS", "bad host:80");
  bad_env("FLOTILLA_CURRENT_ENDPOINT", ":80");
  bad_env("FLOTILLA_PSERVERS_IP_PORT_LIST", "a:1,b:x");
  bad_env("FLOTILLA_SELECTED_GPUS", "0,,1");
  bad_env("FLOTILLA_SELECTED_GPUS", "0,0");
  bad_env("FLOTILLA_SELECTED_GPUS", "gpu0");
  bad_env("FLOTILLA_TOKEN", "   ");
  bad_env("FLOTILLA_TOKEN", "two words");
  clear_env();
}
END_TEST

START_TEST(test_endpoints) {
  fl_endpoint e, list[4];
  char buf[64];
  int n, bad;
  ck_assert_int_eq(fl_endpoint_parse("node-1.example.org:8080", &e), FL_OK);
  ck_assert_str_eq(e.host, "node-1.example.org");
  ck_assert_uint_eq(e.port, 8080);
  ck_assert_str_eq(fl_endpoint_format(&e, buf, sizeof buf), "node-1.example.org:8080");
  ck_assert_int_eq(fl_endpoint_parse("[fe80::1]:9", &e), FL_OK);
  ck_assert_str_eq(fl_endpoint_format(&e, buf, sizeof buf), "[fe80::1]:9");
  ck_assert_int_eq(fl_endpoint_parse("[fe80::1]9", &e), FL_EINVAL);
  ck_assert_int_eq(fl_endpoint_parse("host:+80", &e), FL_EINVAL);
  ck_assert_int_eq(fl_endpoint_parse("host:", &e), FL_EINVAL);
  ck_assert_int_eq(fl_endpoint_list_parse("a:1,b:2,c:3", list, 4, &n, &bad), FL_OK);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(fl_endpoint_list_parse("a:1,b:2,c:3,d:4,e:5", list, 4, &n, &bad), FL_EINVAL);
  ck_assert_int_eq(bad, 4);
  ck_assert_int_eq(fl_endpoint_list_parse("a:1,b", list, 4, &n, &bad), FL_EINVAL);
  ck_assert_int_eq(bad, 1);
  ck_assert_int_eq(fl_endpoint_list_parse("", list, 4, &n, &bad), FL_OK);
  ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(test_flags) {
  fl_cluster c;
  int m;
  clear_env();
  quiet();
  setenv("FLOTILLA_TRAINER_ID", "0", 1);
  ck_assert_int_eq(fl_cluster_from_env(&c), FL_OK);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--trainer_id=1", &m), FL_OK);
  ck_assert_int_eq(m, 1);
  ck_assert_int_eq(c.trainer_id, 1);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--trainers_num=2", &m), FL_OK);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--mode=collective", &m), FL_OK);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--trainer_endpoints=127.0.0.1:5000,127.0.0.1:5001",
                                         &m), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_OK);
  ck_assert_uint_eq(c.current_endpoint.port, 5001);
  /* someone else's flags and non-flags pass through */
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--config=job.yaml", &m), FL_OK);
  ck_assert_int_eq(m, 0);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "job.yaml", &m), FL_OK);
  ck_assert_int_eq(m, 0);
  /* bad values and the token */
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--trainer_id=x", &m), FL_EINVAL);
  ck_assert_int_eq(m, 1);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--trainer_id", &m), FL_EINVAL);
  ck_assert_int_eq(fl_cluster_apply_flag(&c, "--token=abc", &m), FL_EINVAL);
  ck_assert_int_eq(m, 1);
  ck_assert_int_eq(fl_cluster_set(&c, "token", "abc"), FL_EINVAL);
  ck_assert_int_eq(fl_cluster_set(&c, "nonsense", "1"), FL_ENOTFOUND);
  ck_assert_int_eq(fl_cluster_set(&c, "pservers", "10.0.0.1:1,10.0.0.2:1"), FL_OK);
  ck_assert_int_eq(c.n_pservers, 2);
  ck_assert_int_eq(fl_cluster_set(&c, "role", "PSERVER"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "pserver_id", "1"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "mode", "ps"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_OK);

  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fl_cluster_print_flag_help(f);
  fclose(f);
  ck_assert(strstr(buf, "--trainer_endpoints=VALUE") && strstr(buf, "FLOTILLA_TRAINER_ENDPOINTS"));
  ck_assert(strstr(buf, "--pservers=VALUE") && strstr(buf, "FLOTILLA_TOKEN"));
  free(buf);
  clear_env();
}
END_TEST

START_TEST(test_validate) {
  fl_cluster c;
  quiet();
  fl_cluster_defaults(&c);
  c.trainers_num = 2;
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_EINVAL); /* local, 2 trainers */
  fl_cluster_defaults(&c);
  c.trainers_num = 2;
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* no endpoints */
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_endpoints", "h:1,h:2,h:3"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* 3 != 2 */
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_endpoints", "h:1,h:1"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* duplicate */
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_endpoints", "h:1,h:2"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_id", "2"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* id out of range */
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_id", "1"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "current_endpoint", "h:1"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* not rank 1's */
  ck_assert_int_eq(fl_cluster_set(&c, "current_endpoint", "h:2"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  c.mode_set = 0;
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_PS), FL_EINVAL); /* ps without pservers */
  ck_assert_int_eq(fl_cluster_set(&c, "local_rank", "0"), FL_OK);
  c.mode_set = 0;
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* rank w/o size */
  ck_assert_int_eq(fl_cluster_set(&c, "local_size", "1"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);

  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_set(&c, "role", "pserver"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL); /* pserver, not ps */
  ck_assert_int_eq(fl_cluster_set(&c, "pservers", "h:1,h:2"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_PS), FL_EINVAL); /* no pserver_id */
  ck_assert_int_eq(fl_cluster_set(&c, "pserver_id", "0"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "current_endpoint", "h:2"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_PS), FL_EINVAL); /* not pserver 0's */
  ck_assert_int_eq(fl_cluster_set(&c, "current_endpoint", "h:1"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_PS), FL_OK);
}
END_TEST

START_TEST(test_apply_to_job) {
  fl_cluster c;
  fl_job j;
  fl_job_defaults(&j);
  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_set(&c, "checkpoint_dir", "/var/lib/flotilla/ck"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "token_file", "/etc/flotilla/token"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "mode", "collective"), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, j.cluster.mode), FL_OK);
  ck_assert_int_eq(fl_cluster_apply_to_job(&c, &j), FL_OK);
  ck_assert_int_eq(j.cluster.mode, FL_MODE_COLLECTIVE);
  ck_assert_str_eq(j.train.checkpoint_dir, "/var/lib/flotilla/ck");
  ck_assert_str_eq(j.pserver.checkpoint_dir, "");
  ck_assert_str_eq(j.cluster.token_file, "/etc/flotilla/token");
  ck_assert_int_eq(fl_cluster_set(&c, "role", "PSERVER"), FL_OK);
  ck_assert_int_eq(fl_cluster_apply_to_job(&c, &j), FL_OK);
  ck_assert_str_eq(j.pserver.checkpoint_dir, "/var/lib/flotilla/ck");
}
END_TEST

START_TEST(test_nodes) {
  fl_cluster c;
  fl_node_map m;
  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_nodes(&c, &m), FL_OK);
  ck_assert_int_eq(m.n_nodes, 1);
  ck_assert_int_eq(m.node_size[0], 1);
  c.trainers_num = 4;
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_endpoints",
                                  "127.0.0.2:1,127.0.0.3:2,127.0.0.2:3,127.0.0.3:4"), FL_OK);
  ck_assert_int_eq(fl_cluster_nodes(&c, &m), FL_OK);
  ck_assert_int_eq(m.n_nodes, 2);
  int want_node[] = {0, 1, 0, 1}, want_local[] = {0, 0, 1, 1};
  for (int r = 0; r < 4; r++) {
    ck_assert_int_eq(m.node_of[r], want_node[r]);
    ck_assert_int_eq(m.local_rank[r], want_local[r]);
  }
  ck_assert_int_eq(m.node_size[0], 2);
  ck_assert_int_eq(m.node_size[1], 2);
  ck_assert_int_eq(m.node_leader[0], 0);
  ck_assert_int_eq(m.node_leader[1], 1);
  int node, lr, ls;
  c.trainer_id = 3;
  ck_assert_int_eq(fl_cluster_local(&c, &node, &lr, &ls), FL_OK);
  ck_assert_int_eq(node, 1);
  ck_assert_int_eq(lr, 1);
  ck_assert_int_eq(ls, 2);
}
END_TEST

START_TEST(test_token) {
  char dir[] = "/tmp/fl_test_cluster_XXXXXX", path[128], tok[FL_TOKEN_MAX];
  fl_cluster c;
  quiet();
  clear_env();
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/token", dir);
  FILE *f = fopen(path, "w");
  fputs("\n  abcDEF123==  \n\n", f);
  fclose(f);
  chmod(path, 0600);
  ck_assert_int_eq(fl_token_read_file(path, tok, sizeof tok), FL_OK);
  ck_assert_str_eq(tok, "abcDEF123==");

  /* job's token file, the flag's, the environment's token: increasing priority */
  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_load_token(&c, NULL), FL_OK);
  ck_assert_str_eq(c.token, "");
  ck_assert_int_eq(fl_cluster_load_token(&c, path), FL_OK);
  ck_assert_str_eq(c.token, "abcDEF123==");
  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_set(&c, "token_file", "/nonexistent/token"), FL_OK);
  ck_assert_int_eq(fl_cluster_load_token(&c, path), FL_EIO);
  setenv("FLOTILLA_TOKEN", "from-env", 1);
  ck_assert_int_eq(fl_cluster_from_env(&c), FL_OK);
  ck_assert_int_eq(fl_cluster_load_token(&c, path), FL_OK);
  ck_assert_str_eq(c.token, "from-env");
  unsetenv("FLOTILLA_TOKEN");

  f = fopen(path, "w");
  fputs(" \n\t\n", f);
  fclose(f);
  ck_assert_int_eq(fl_token_read_file(path, tok, sizeof tok), FL_EINVAL);
  f = fopen(path, "w");
  fputs("two words\n", f);
  fclose(f);
  ck_assert_int_eq(fl_token_read_file(path, tok, sizeof tok), FL_EINVAL);
  unlink(path);
  ck_assert_int_eq(fl_token_read_file(path, tok, sizeof tok), FL_EIO);
  rmdir(dir);
}
END_TEST

START_TEST(test_print_envs) {
  fl_cluster c;
  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_set(&c, "mode", "collective"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "trainers_num", "12"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_id", "11"), FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "trainer_endpoints",
                                  "10.0.0.1:6170,10.0.0.1:6171,10.0.0.1:6172,10.0.0.2:6170,"
                                  "10.0.0.2:6171,10.0.0.2:6172,10.0.0.3:6170,10.0.0.3:6171,"
                                  "10.0.0.3:6172,10.0.0.4:6170,10.0.0.4:6171,10.0.0.4:6172"),
                   FL_OK);
  ck_assert_int_eq(fl_cluster_set(&c, "selected_gpus", "1"), FL_OK);
  snprintf(c.token, sizeof c.token, "%s", "hush-hush");
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_OK);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fl_cluster_print_envs(&c, f);
  fclose(f);
  ck_assert(strstr(buf, "Distributed Envs") != NULL);
  ck_assert(strstr(buf, "FLOTILLA_TRAINER_ID    11") != NULL);
  ck_assert(strstr(buf, "FLOTILLA_TRAINERS_NUM    12") != NULL);
  ck_assert(strstr(buf, "FLOTILLA_CURRENT_ENDPOINT    10.0.0.4:6172") != NULL);
  ck_assert(strstr(buf, "FLOTILLA_TRAINER_ENDPOINTS    10.0.0.1:6170,") != NULL);
  ck_assert(strstr(buf, "10.0.0.4:6172 ") != NULL); /* the list wraps, nothing lost */
  ck_assert(strstr(buf, "FLOTILLA_SELECTED_GPUS    1") != NULL);
  ck_assert(strstr(buf, "hush-hush") == NULL);
  ck_assert(strstr(buf, "FLOTILLA_TOKEN    <set>") != NULL);
  for (char *line = buf; *line;) {
    char *nl = strchr(line, '\n');
    ck_assert_ptr_nonnull(nl);
    ck_assert_int_eq((int)(nl - line), 88);
    line = nl + 1;
  }
  free(buf);
}
END_TEST

/* A rank's GPU: the selected list by local rank, else local rank modulo
 * the devices; a selected id the machine lacks is refused. */
START_TEST(test_gpu_choice) {
  fl_cluster c;
  int d = -1;
  fl_cluster_defaults(&c);
  ck_assert_int_eq(fl_cluster_gpu(&c, 5, 4, &d), FL_OK);
  ck_assert_int_eq(d, 1);
  ck_assert_int_eq(fl_cluster_set(&c, "selected_gpus", "3,2"), FL_OK);
  ck_assert_int_eq(fl_cluster_gpu(&c, 0, 4, &d), FL_OK);
  ck_assert_int_eq(d, 3);
  ck_assert_int_eq(fl_cluster_gpu(&c, 3, 4, &d), FL_OK);
  ck_assert_int_eq(d, 2);
  quiet();
  ck_assert_int_eq(fl_cluster_gpu(&c, 0, 2, &d), FL_EINVAL);
  ck_assert_int_eq(fl_cluster_gpu(&c, 0, 0, &d), FL_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cluster");
  TCase *tc = tcase_create("env");
  tcase_add_test(tc, test_env);
  tcase_add_test(tc, test_env_errors);
  tcase_add_test(tc, test_endpoints);
  tcase_add_test(tc, test_flags);
  tcase_add_test(tc, test_validate);
  tcase_add_test(tc, test_apply_to_job);
  tcase_add_test(tc, test_nodes);
  tcase_add_test(tc, test_token);
  tcase_add_test(tc, test_print_envs);
  tcase_add_test(tc, test_gpu_choice);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
