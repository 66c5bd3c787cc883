/* fuzz_cluster.c - the cluster description's parsers (the FLOTILLA_*
 * variables and --flags that launchers and users hand every daemon):
 * endpoints, endpoint lists, and fl_cluster_apply_flag / fl_cluster_validate
 * over any set of flags.
 *
 * Input: one byte choosing the job's mode (local, collective, ps), then
 * lines, each given to fl_cluster_apply_flag as an argument (so
 * "--trainer_endpoints=a:1,b:2"), to fl_endpoint_parse and to
 * fl_endpoint_list_parse, and to the Slurm hostlist and task-count parsers
 * (fl_slurm_hostlist_host, fl_slurm_tasks_on_node).
 * Invariants: a parsed endpoint has a non-empty host and a port in
 * 1..65535 and formats to text that parses back to the same endpoint;
 * list parsing never reports more entries than its capacity; a Slurm
 * hostlist that parses has 1 .. FL_SLURM_MAX_HOSTS hosts, its first and last
 * hosts are non-empty and fit, and a reason is given for every refusal; a
 * validated
 * cluster has its ids in range (trainer_id for a trainer, pserver_id for a
 * pserver), and its node map and local rank agree with
 * it. */
#include <config.h>

#include <string.h>

#include "fl_cluster.h"
#include "fl_config.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (64 * 1024)
#define LIST_CAP 8

static fl_cluster g_c; /* large: off the stack */
static fl_node_map g_map;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

static void check_endpoint(const fl_endpoint *e) {
  char text[FL_HOST_MAX + 16];
  fl_endpoint again;
  FUZZ_CHECK(e->host[0] != '\0' && e->port >= 1, "host \"%s\" port %u", e->host, e->port);
  FUZZ_CHECK(memchr(e->host, '\0', FL_HOST_MAX) != NULL, "host not terminated");
  fl_endpoint_format(e, text, sizeof text);
  FUZZ_CHECK(fl_endpoint_parse(text, &again) == FL_OK, "formatted \"%s\" does not parse", text);
  FUZZ_CHECK(!strcmp(again.host, e->host) && again.port == e->port, "\"%s\" parses differently",
             text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const fl_mode modes[3] = {FL_MODE_LOCAL, FL_MODE_COLLECTIVE, FL_MODE_PS};
  fl_endpoint e, list[LIST_CAP];
  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  fl_mode mode = modes[data[0] % 3];
  char *text = malloc(size);
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';

  fl_cluster_defaults(&g_c);
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    int matched = 0, n = -1, bad = -2;
    if (fl_endpoint_parse(line, &e) == FL_OK) check_endpoint(&e);
    fl_status st = fl_endpoint_list_parse(line, list, LIST_CAP, &n, &bad);
    FUZZ_CHECK(n >= 0 && n <= LIST_CAP, "list count %d", n);
    if (st == FL_OK) {
      FUZZ_CHECK(bad == -1, "bad index %d on success", bad);
      for (int i = 0; i < n; i++) check_endpoint(&list[i]);
    } else {
      FUZZ_CHECK(st == FL_EINVAL && bad >= 0, "list status %d, bad index %d", (int)st, bad);
    }
    char host[FL_HOST_MAX], why[160];
    int count = -1, tasks = 0;
    why[0] = '\0';
    st = fl_slurm_hostlist_host(line, 0, host, sizeof host, &count, why, sizeof why);
    if (st == FL_OK) {
      FUZZ_CHECK(count >= 1 && count <= FL_SLURM_MAX_HOSTS && host[0], "hostlist: %d hosts, "
                 "first \"%s\"", count, host);
      st = fl_slurm_hostlist_host(line, count - 1, host, sizeof host, NULL, why, sizeof why);
      FUZZ_CHECK(st == FL_OK || strstr(why, "longer than"), "last host of %d: %s", count, why);
    } else {
      FUZZ_CHECK(st == FL_EINVAL && why[0], "hostlist status %d without a reason", (int)st);
    }
    why[0] = '\0';
    st = fl_slurm_tasks_on_node(line, 0, &tasks, why, sizeof why);
    FUZZ_CHECK(st == FL_OK ? tasks >= 1 : why[0] != '\0', "tasks status %d, %d tasks", (int)st,
               tasks);
    st = fl_cluster_apply_flag(&g_c, line, &matched);
    FUZZ_CHECK(st == FL_OK || (matched && st == FL_EINVAL), "flag status %d (matched %d)",
               (int)st, matched);
  }
  free(text);

  if (fl_cluster_validate(&g_c, mode) != FL_OK) return 0;
  FUZZ_CHECK(g_c.trainers_num >= 1 && g_c.trainers_num <= FL_CLUSTER_MAX_TRAINERS,
             "trainers_num %d", g_c.trainers_num);
  if (g_c.role == FL_ROLE_TRAINER)
    FUZZ_CHECK(g_c.trainer_id >= 0 && g_c.trainer_id < g_c.trainers_num, "trainer_id %d of %d",
               g_c.trainer_id, g_c.trainers_num);
  FUZZ_CHECK(g_c.n_trainer_endpoints == 0 || g_c.n_trainer_endpoints == g_c.trainers_num,
             "%d endpoints for %d trainers", g_c.n_trainer_endpoints, g_c.trainers_num);
  for (int i = 0; i < g_c.n_trainer_endpoints; i++) check_endpoint(&g_c.trainer_endpoints[i]);
  for (int i = 0; i < g_c.n_pservers; i++) check_endpoint(&g_c.pserver_endpoints[i]);
  if (g_c.role == FL_ROLE_PSERVER)
    FUZZ_CHECK(g_c.pserver_id >= 0 && g_c.pserver_id < g_c.n_pservers, "pserver_id %d of %d",
               g_c.pserver_id, g_c.n_pservers);
  if (fl_cluster_nodes(&g_c, &g_map) == FL_OK) {
    int total = 0;
    FUZZ_CHECK(g_map.n_nodes >= 1 && g_map.n_nodes <= g_c.trainers_num, "%d nodes",
               g_map.n_nodes);
    for (int k = 0; k < g_map.n_nodes; k++) total += g_map.node_size[k];
    FUZZ_CHECK(total == (g_c.n_trainer_endpoints ? g_c.n_trainer_endpoints : 1),
               "nodes hold %d ranks", total);
  }
  int node, lr, ls;
  if (fl_cluster_local(&g_c, &node, &lr, &ls) == FL_OK)
    FUZZ_CHECK(ls >= 1 && lr >= 0 && lr < ls, "local rank %d of %d", lr, ls);
  char *out = NULL;
  size_t olen = 0;
  FILE *m = open_memstream(&out, &olen);
  FUZZ_CHECK(m != NULL, "open_memstream");
  fl_cluster_print_envs(&g_c, m);
  fclose(m);
  free(out);
  return 0;
}
