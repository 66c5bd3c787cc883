/* test_cluster.c - FLOTILLA_* parsing, flag overrides, validation errors,
 * node grouping by host, token loading, the "Distributed Envs" table, and
 * the place taken from cluster engines (Slurm, torchrun, OpenMPI, Paddle),
 * their conflicts, and the Slurm hostlist parser (hostile lists too). */
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

static const char *const k_engine_vars[] = {
    "SLURM_", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "GROUP_RANK=",
    "MASTER_ADDR=", "MASTER_PORT=", "TORCHELASTIC_", "OMPI_COMM_WORLD_", "PADDLE_"};

static int engine_var(const char *kv) {
  for (size_t i = 0; i < sizeof k_engine_vars / sizeof k_engine_vars[0]; i++)
    if (!strncmp(kv, k_engine_vars[i], strlen(k_engine_vars[i]))) return 1;
  return 0;
}

static void clear_env(void) {
  for (int again = 1; again;) {
    again = 0;
    for (char **e = environ; *e; e++) {
      if (!engine_var(*e) &&
          (strncmp(*e, "FLOTILLA_", 9) || !strncmp(*e, "FLOTILLA_LOG_LEVEL", 18)))
        continue;
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
  /* the collective transport is a cluster setting like the rank */
  ck_assert_int_eq(fl_cluster_set(&c, "collective_backend", "shm"), FL_OK);
  ck_assert_str_eq(c.collective_backend, "shm");
  ck_assert_int_eq(fl_cluster_set(&c, "collective_backend", "infiniband-verbs"), FL_EINVAL);
  ck_assert_int_eq(fl_cluster_set(&c, "collective_backend", ""), FL_EINVAL);
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

/* ------------------------------------------------------------ engines */

/* Run fl_cluster_from_env + fl_cluster_from_engines with stderr captured
 * into log (cap bytes); returns the engines' status. */
static fl_status engines_logged(fl_cluster *c, fl_mode mode, char *log, size_t cap) {
  char path[] = "/tmp/fl_test_cluster_logXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fl_log_set_level(FL_LOG_INFO);
  fl_status st = fl_cluster_from_env(c);
  if (st == FL_OK) st = fl_cluster_from_engines(c, mode);
  quiet();
  dup2(saved, STDERR_FILENO);
  close(saved);
  ssize_t n = pread(fd, log, cap - 1, 0);
  log[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return st;
}

static void expect_host(const char *list, int index, const char *want) {
  char host[FL_HOST_MAX], why[160];
  int n = -1;
  ck_assert_msg(fl_slurm_hostlist_host(list, index, host, sizeof host, &n, why, sizeof why) ==
                    FL_OK, "%s: %s", list, why);
  ck_assert_str_eq(host, want);
}

static void expect_bad_list(const char *list, const char *reason_part) {
  char host[FL_HOST_MAX], why[160];
  int n = -1;
  ck_assert_msg(fl_slurm_hostlist_host(list, 0, host, sizeof host, &n, why, sizeof why) ==
                    FL_EINVAL, "accepted %s", list);
  ck_assert_msg(strstr(why, reason_part) != NULL, "%s: reason \"%s\" lacks \"%s\"", list, why,
                reason_part);
}

START_TEST(test_slurm_hostlist) {
  int n = 0;
  char host[FL_HOST_MAX], why[160];
  const char *list = "node[01-04,07],gpu-a[1-2]";
  ck_assert_int_eq(fl_slurm_hostlist_host(list, -1, NULL, 0, &n, why, sizeof why), FL_OK);
  ck_assert_int_eq(n, 7);
  const char *want[] = {"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"};
  for (int i = 0; i < 7; i++) expect_host(list, i, want[i]);
  expect_host("single", 0, "single");
  expect_host("n[8-11]", 3, "n11");          /* no padding: width of "8" */
  expect_host("n[008-011]", 2, "n010");      /* padding of the lower bound */
  expect_host("r[1-2]-c[1-3]", 0, "r1-c1");  /* last group fastest */
  expect_host("r[1-2]-c[1-3]", 3, "r2-c1");
  expect_host("r[1-2]-c[1-3]", 5, "r2-c3");
  expect_host("a,b[5],c", 2, "c");
  expect_host("x[0-999999]", 999999, "x999999");
  ck_assert_int_eq(fl_slurm_hostlist_host("r[1-2]-c[1-3],z", -1, NULL, 0, &n, why, sizeof why),
                   FL_OK);
  ck_assert_int_eq(n, 7);

  expect_bad_list("", "empty");
  expect_bad_list("node[", "without ']'");
  expect_bad_list("node]", "unbalanced brackets");
  expect_bad_list("node[1-", "without ']'");
  expect_bad_list("node[1-]", "after '-'");
  expect_bad_list("node[5-3]", "backwards");
  expect_bad_list("node[]", "empty brackets");
  expect_bad_list("node[1,]", "','");
  expect_bad_list("node[,1]", "expected a number");
  expect_bad_list("node[a-b]", "expected a number");
  expect_bad_list("node[1[2]]", "brackets");
  expect_bad_list("n[0-1234567890]", "9 digits");
  expect_bad_list("n[0-999999999]", "more than");
  expect_bad_list("a[1-1000]b[1-1000]c[1-1000]", "more than");
  expect_bad_list("a[1-1024],b[1-1024],c[0-1048000]", "more than");
  expect_bad_list(",a", "empty host");
  expect_bad_list("a,", "trailing");
  expect_bad_list("a,,b", "empty host");
  expect_bad_list("a b", "not allowed");
  expect_bad_list("a\n", "not allowed");
  expect_bad_list("a[1]b[2]c[3]d[4]e[5]f[6]g[7]h[8]i[9]", "bracket groups");
  /* Only the host asked for must fit the buffer. */
  char longname[300];
  memset(longname, 'h', sizeof longname);
  longname[sizeof longname - 1] = '\0';
  ck_assert_int_eq(fl_slurm_hostlist_host(longname, 0, host, sizeof host, &n, why, sizeof why),
                   FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(why, "longer than"));
  ck_assert_int_eq(fl_slurm_hostlist_host("a[1-3]", 3, host, sizeof host, &n, why, sizeof why),
                   FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(why, "has 3"));
  ck_assert_int_eq(fl_slurm_hostlist_host("a[1-3]", 0, host, 1, &n, why, sizeof why), FL_EINVAL);

  int t = 0;
  ck_assert_int_eq(fl_slurm_tasks_on_node("2(x3),1", 0, &t, why, sizeof why), FL_OK);
  ck_assert_int_eq(t, 2);
  ck_assert_int_eq(fl_slurm_tasks_on_node("2(x3),1", 2, &t, why, sizeof why), FL_OK);
  ck_assert_int_eq(t, 2);
  ck_assert_int_eq(fl_slurm_tasks_on_node("2(x3),1", 3, &t, why, sizeof why), FL_OK);
  ck_assert_int_eq(t, 1);
  ck_assert_int_eq(fl_slurm_tasks_on_node("2(x3),1", 4, &t, why, sizeof why), FL_EINVAL);
  ck_assert_int_eq(fl_slurm_tasks_on_node("8", 0, &t, why, sizeof why), FL_OK);
  ck_assert_int_eq(t, 8);
  const char *bad[] = {"", "x", "2(x", "2(3)", "2(x0)", "0", "2(x3)1", "2,", "2(x9999999999)"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(fl_slurm_tasks_on_node(bad[i], 0, &t, why, sizeof why) == FL_EINVAL,
                  "accepted %s", bad[i]);
}
END_TEST

START_TEST(test_engine_slurm) {
  fl_cluster c;
  char log[4096];
  clear_env();
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
  setenv("SLURM_JOB_NODELIST", "node[01-02]", 1);
  setenv("SLURM_JOB_ID", "31234", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_ptr_nonnull(strstr(log, "place from slurm: trainer 3 of 4"));
  ck_assert_str_eq(c.source, "slurm");
  ck_assert_int_eq(c.trainer_id, 3);
  ck_assert_int_eq(c.trainers_num, 4);
  ck_assert_int_eq(c.local_rank, 1);
  ck_assert_int_eq(c.local_size, 2);
  ck_assert_int_eq(c.endpoints_partial, 1);
  ck_assert_int_eq(c.n_trainer_endpoints, 4);
  ck_assert_str_eq(c.trainer_endpoints[0].host, "node01");
  ck_assert_uint_eq(c.trainer_endpoints[0].port, 21234); /* 20000 + 31234 % 10000 */
  ck_assert_str_eq(c.trainer_endpoints[3].host, "node02"); /* node 1 of the list */
  ck_assert_uint_eq(c.trainer_endpoints[3].port, 0);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  int node, lr, ls;
  ck_assert_int_eq(fl_cluster_local(&c, &node, &lr, &ls), FL_OK);
  ck_assert_int_eq(node, 1);
  ck_assert_int_eq(lr, 1);
  ck_assert_int_eq(ls, 2);
  fl_node_map m;
  ck_assert_int_eq(fl_cluster_nodes(&c, &m), FL_EINVAL);

  /* The step's list and the node's own name win; MASTER_* win over both. */
  setenv("SLURM_STEP_NODELIST", "gpu[7-8]", 1);
  setenv("SLURMD_NODENAME", "gpu8", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.trainer_endpoints[0].host, "gpu7");
  ck_assert_str_eq(c.trainer_endpoints[3].host, "gpu8");
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "6000", 1);
  unsetenv("RANK");
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.trainer_endpoints[0].host, "10.1.2.3");
  ck_assert_uint_eq(c.trainer_endpoints[0].port, 6000);

  /* Rank 0 holds the rendezvous. */
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NODEID", "0", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  ck_assert_str_eq(c.current_endpoint.host, "10.1.2.3");

  /* Hostile values are named. */
  setenv("SLURM_STEP_NODELIST", "gpu[7-", 1);
  unsetenv("MASTER_ADDR");
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "SLURM_STEP_NODELIST=gpu[7-: "));
  setenv("SLURM_STEP_NODELIST", "gpu[7-8]", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "SLURM_STEP_TASKS_PER_NODE"));
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
  setenv("SLURM_NTASKS", "many", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "SLURM_NTASKS=many: not an integer"));
  setenv("SLURM_NTASKS", "4", 1);
  unsetenv("SLURM_JOB_ID");
  unsetenv("MASTER_PORT");
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "no MASTER_PORT"));
  /* ps mode needs no rendezvous: the trainers talk to the pservers. */
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_OK);
  ck_assert_int_eq(c.trainer_id, 0);
  ck_assert_int_eq(c.n_trainer_endpoints, 0);
  clear_env();
}
END_TEST

START_TEST(test_engine_torchrun) {
  fl_cluster c;
  char log[4096];
  clear_env();
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "6", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("GROUP_RANK", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_ptr_nonnull(strstr(log, "place from torchrun: trainer 3 of 6"));
  ck_assert_int_eq(c.trainer_id, 3);
  ck_assert_int_eq(c.trainers_num, 6);
  ck_assert_int_eq(c.local_rank, 1);
  ck_assert_int_eq(c.local_size, 2);
  ck_assert_int_eq(c.node_index, 1);
  ck_assert_str_eq(c.trainer_endpoints[0].host, "127.0.0.1");
  ck_assert_uint_eq(c.trainer_endpoints[0].port, 29500);
  /* the route to 127.0.0.1 stays on this machine: rank 0's host name */
  ck_assert_str_eq(c.trainer_endpoints[3].host, "127.0.0.1");
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  /* torchrun's agent holds MASTER_PORT itself */
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_uint_eq(c.trainer_endpoints[0].port, 29501);
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  /* FLOTILLA_CURRENT_ENDPOINT names this process's own address */
  setenv("FLOTILLA_CURRENT_ENDPOINT", "10.77.0.2:7000", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.trainer_endpoints[3].host, "10.77.0.2");
  ck_assert_uint_eq(c.trainer_endpoints[3].port, 7000);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  unsetenv("FLOTILLA_CURRENT_ENDPOINT");

  unsetenv("MASTER_PORT");
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "MASTER_ADDR and MASTER_PORT"));
  setenv("MASTER_PORT", "70000", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "MASTER_PORT=70000"));
  setenv("MASTER_PORT", "29500", 1);
  setenv("MASTER_ADDR", "bad host!", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "MASTER_ADDR=bad host!"));
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  unsetenv("WORLD_SIZE");
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "RANK and WORLD_SIZE go together"));
  setenv("WORLD_SIZE", "6", 1);
  setenv("RANK", "6", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_EINVAL);
  clear_env();
}
END_TEST

START_TEST(test_engine_openmpi_paddle) {
  fl_cluster c;
  char log[4096];
  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "mpirun -x"));
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "6170", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "openmpi");
  ck_assert_int_eq(c.trainer_id, 1);
  ck_assert_int_eq(c.local_rank, 1);
  ck_assert_int_eq(c.local_size, 2);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  clear_env();

  setenv("PADDLE_TRAINER_ID", "1", 1);
  setenv("PADDLE_TRAINERS_NUM", "2", 1);
  setenv("PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "paddle");
  ck_assert_int_eq(c.endpoints_partial, 0);
  ck_assert_str_eq(c.trainer_endpoints[1].host, "10.0.0.2");
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_COLLECTIVE), FL_OK);
  ck_assert_str_eq(c.current_endpoint.host, "10.0.0.2");
  int node, lr, ls;
  ck_assert_int_eq(fl_cluster_local(&c, &node, &lr, &ls), FL_OK);
  ck_assert_int_eq(node, 1);
  setenv("PADDLE_CURRENT_ENDPOINT", "10.0.0.1:6170", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "PADDLE_CURRENT_ENDPOINT=10.0.0.1:6170 is not trainer 1"));
  unsetenv("PADDLE_CURRENT_ENDPOINT");
  setenv("PADDLE_TRAINERS_NUM", "3", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "lists 2 endpoints but PADDLE_TRAINERS_NUM is 3"));
  setenv("PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,,x:1", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_COLLECTIVE, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "entry 1"));
  clear_env();
}
END_TEST

START_TEST(test_engine_conflicts) {
  fl_cluster c;
  char log[4096];
  clear_env();
  /* Agreeing sources: the first of paddle, torchrun, openmpi, slurm. */
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "torchrun");
  /* Disagreeing ones: an error naming both, with their values. */
  setenv("RANK", "0", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "torchrun (RANK=0, WORLD_SIZE=2) and slurm (SLURM_PROCID=1, "
                                    "SLURM_NTASKS=2) disagree"));
  ck_assert_ptr_nonnull(strstr(log, "FLOTILLA_CLUSTER_ENV"));
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "torchrun (RANK=0, WORLD_SIZE=2, LOCAL_RANK=0) and openmpi "
                                    "(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=2, "
                                    "OMPI_COMM_WORLD_LOCAL_RANK=1) disagree"));
  /* FLOTILLA_CLUSTER_ENV picks one, or none. */
  setenv("FLOTILLA_CLUSTER_ENV", "slurm", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "slurm");
  ck_assert_int_eq(c.trainer_id, 1);
  setenv("FLOTILLA_CLUSTER_ENV", "none", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "");
  ck_assert_int_eq(c.trainers_num, 1);
  setenv("FLOTILLA_CLUSTER_ENV", "paddle", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "PADDLE_TRAINER_ID"));
  setenv("FLOTILLA_CLUSTER_ENV", "kubernetes", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "FLOTILLA_CLUSTER_ENV=kubernetes"));
  unsetenv("FLOTILLA_CLUSTER_ENV");
  /* FLOTILLA_* (flotilla-run) give the place: the engines are not asked. */
  setenv("FLOTILLA_TRAINER_ID", "0", 1);
  setenv("FLOTILLA_TRAINERS_NUM", "1", 1);
  setenv("SLURM_NTASKS", "garbage", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_LOCAL, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "");
  ck_assert_ptr_nonnull(strstr(log, "variables are not used"));
  /* A job in local mode is one trainer alone, whatever the engine says. */
  unsetenv("FLOTILLA_TRAINER_ID");
  unsetenv("FLOTILLA_TRAINERS_NUM");
  setenv("SLURM_NTASKS", "4", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_LOCAL, log, sizeof log), FL_OK);
  ck_assert_str_eq(c.source, "");
  ck_assert_int_eq(c.trainers_num, 1);
  ck_assert_ptr_nonnull(strstr(log, "mode local; "));
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_LOCAL), FL_OK);
  clear_env();

  /* A pserver takes its id from the engine when the sizes agree. */
  setenv("FLOTILLA_ROLE", "PSERVER", 1);
  setenv("FLOTILLA_PSERVERS_IP_PORT_LIST", "127.0.0.1:7001,127.0.0.1:7002", 1);
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_OK);
  ck_assert_int_eq(c.pserver_id, 1);
  ck_assert_int_eq(fl_cluster_validate(&c, FL_MODE_PS), FL_OK);
  ck_assert_uint_eq(c.current_endpoint.port, 7002);
  setenv("SLURM_NTASKS", "3", 1);
  ck_assert_int_eq(engines_logged(&c, FL_MODE_PS, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "set FLOTILLA_PSERVER_ID"));
  clear_env();
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
  tcase_add_test(tc, test_slurm_hostlist);
  tcase_add_test(tc, test_engine_slurm);
  tcase_add_test(tc, test_engine_torchrun);
  tcase_add_test(tc, test_engine_openmpi_paddle);
  tcase_add_test(tc, test_engine_conflicts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
