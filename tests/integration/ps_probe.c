/* ps_probe.c - a small gRPC client of flotilla-pserver for the shell tests
 * of faults and security (tests/integration/test_faults*.sh,
 * test_security.sh) and the soak benchmark (tests/bench/soak_ps.sh), which
 * cannot speak gRPC themselves.  Not a test by itself.
 *
 *   ps_probe stats HOST:PORT   the Stats answer, one `name value` line per
 *                              field, then `response_bytes N` (what this
 *                              call added to the server's bytes_out)
 *   ps_probe calls HOST:PORT   one call of every method of the service,
 *                              printing `Method CODE` for each (the
 *                              requests are minimal; only the status code
 *                              matters: the token check comes first)
 *   ps_probe save HOST:PORT    SaveCheckpoint: `step N` and `path P`
 *   ps_probe latest DIR        the newest checkpoint of DIR that verifies
 *                              (fl_ckpt_dir_load_latest): `step N` from its
 *                              name, and its ps/step or meta/step record
 *                              as `recorded_step N`; exit 1 when none does
 *
 * Environment: FLOTILLA_TOKEN (the token sent; none when unset),
 * FL_PROBE_TLS_CA / FL_PROBE_TLS_CERT / FL_PROBE_TLS_KEY (PEM files: TLS
 * with that CA, and a client certificate), FL_PROBE_TIMEOUT (seconds per
 * call, default 5).  Exit status: 0 when every call of stats or save went
 * through (calls: always 0 once the calls were made), 1 when one failed
 * (`error: CODE details` on stderr), 2 for a bad command line. */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_ckpt.h"
#include "fl_rpc.h"
#include "flotilla.pb-c.h"

#define PATH(m) "/flotilla.ParameterServer/" m

typedef struct probe {
  grpc_channel *ch;
  const char *token;
  double timeout;
  fl_rpc_outbuf *ob;
  fl_rpc_inbuf in;
} probe;

/* One call; *code gets the status.  Prints the error (not for `calls`). */
static fl_status call(probe *p, const char *method, const ProtobufCMessage *req,
                      grpc_status_code *code, int quiet) {
  char details[512];
  fl_status st = fl_rpc_unary(p->ch, method, req, p->timeout, p->token, p->ob, &p->in, code,
                              details, sizeof details);
  if (st != FL_OK && !quiet)
    fprintf(stderr, "error: %s %s (%s)\n", fl_rpc_code_name(*code), details, method);
  return st;
}

static int do_stats(probe *p) {
  Flotilla__StatsRequest rq = FLOTILLA__STATS_REQUEST__INIT;
  Flotilla__StatsResponse *r;
  grpc_status_code code;
  if (call(p, PATH("Stats"), &rq.base, &code, 0) != FL_OK) return 1;
  r = flotilla__stats_response__unpack(NULL, p->in.len, p->in.data);
  if (!r) {
    fprintf(stderr, "error: malformed Stats answer\n");
    return 1;
  }
  printf("step %" PRId64 "\npushes %" PRIu64 "\npulls %" PRIu64 "\nbytes_in %" PRIu64
         "\nbytes_out %" PRIu64 "\nduplicates %" PRIu64 "\ninvalid %" PRIu64
         "\nsparse_rows %" PRIu64 "\nevicted_rows %" PRIu64 "\nlive_trainers %d"
         "\ncheckpoints %" PRIu64
         "\ndense_updates %" PRIu64 "\nserver_incarnation %" PRIu64 "\ndense_blocks %d"
         "\ndense_elements %" PRIu64 "\nresponse_bytes %zu\n",
         r->step, r->pushes, r->pulls, r->bytes_in, r->bytes_out, r->duplicates, r->invalid,
         r->sparse_rows, r->evicted_rows, r->live_trainers, r->checkpoints, r->dense_updates,
         r->server_incarnation, r->dense_blocks, r->dense_elements, p->in.len);
  flotilla__stats_response__free_unpacked(r, NULL);
  return 0;
}

static int do_save(probe *p) {
  Flotilla__SaveCheckpointRequest rq = FLOTILLA__SAVE_CHECKPOINT_REQUEST__INIT;
  Flotilla__SaveCheckpointResponse *r;
  grpc_status_code code;
  if (call(p, PATH("SaveCheckpoint"), &rq.base, &code, 0) != FL_OK) return 1;
  r = flotilla__save_checkpoint_response__unpack(NULL, p->in.len, p->in.data);
  if (!r) {
    fprintf(stderr, "error: malformed SaveCheckpoint answer\n");
    return 1;
  }
  printf("step %" PRId64 "\npath %s\n", r->step, r->path);
  flotilla__save_checkpoint_response__free_unpacked(r, NULL);
  return 0;
}

/* Every method once, as trainer 0 of a one-trainer job. */
static int do_calls(probe *p) {
  Flotilla__RegisterRequest reg = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__PushDenseRequest push = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
  Flotilla__PullDenseRequest pull = FLOTILLA__PULL_DENSE_REQUEST__INIT;
  Flotilla__PullSparseRequest spull = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
  Flotilla__PushSparseRequest spush = FLOTILLA__PUSH_SPARSE_REQUEST__INIT;
  Flotilla__BarrierRequest bar = FLOTILLA__BARRIER_REQUEST__INIT;
  Flotilla__HeartbeatRequest hb = FLOTILLA__HEARTBEAT_REQUEST__INIT;
  Flotilla__SaveCheckpointRequest save = FLOTILLA__SAVE_CHECKPOINT_REQUEST__INIT;
  Flotilla__LoadCheckpointRequest load = FLOTILLA__LOAD_CHECKPOINT_REQUEST__INIT;
  Flotilla__CompleteRequest done = FLOTILLA__COMPLETE_REQUEST__INIT;
  Flotilla__StatsRequest stats = FLOTILLA__STATS_REQUEST__INIT;
  uint32_t block = 0;
  const struct {
    const char *method;
    const ProtobufCMessage *req;
  } calls[] = {
      {"Register", &reg.base},   {"PushDense", &push.base},        {"PullDense", &pull.base},
      {"PullSparse", &spull.base}, {"PushSparse", &spush.base},    {"Barrier", &bar.base},
      {"Heartbeat", &hb.base},   {"SaveCheckpoint", &save.base},   {"LoadCheckpoint", &load.base},
      {"Complete", &done.base},  {"Stats", &stats.base},
  };
  reg.num_trainers = 1;
  reg.num_servers = 1;
  reg.dense_block_size = 8;
  pull.n_blocks = 1;
  pull.blocks = &block;
  spull.table = "none";
  spush.table = "none";
  bar.name = "probe";
  load.step = -1;
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    char method[64];
    grpc_status_code code;
    snprintf(method, sizeof method, PATH("%s"), calls[i].method);
    call(p, method, calls[i].req, &code, 1);
    printf("%s %s\n", calls[i].method, fl_rpc_code_name(code));
  }
  return 0;
}

static int do_latest(const char *dir) {
  fl_ckpt *c = NULL;
  int64_t step = -1, rec = -1;
  fl_status st = fl_ckpt_dir_load_latest(dir, &c, &step);
  if (st != FL_OK) {
    fprintf(stderr, "error: no valid checkpoint in %s (%s)\n", dir, fl_strerror(st));
    return 1;
  }
  if (fl_ckpt_get_i64(c, "ps/step", &rec) != FL_OK) fl_ckpt_get_i64(c, "meta/step", &rec);
  printf("step %" PRId64 "\nrecorded_step %" PRId64 "\n", step, rec);
  fl_ckpt_free(c);
  return 0;
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

int main(int argc, char **argv) {
  probe p;
  fl_rpc_opts ro;
  int rc = 2;

  if (argc == 3 && !strcmp(argv[1], "latest")) return do_latest(argv[2]);
  if (argc != 3 ||
      (strcmp(argv[1], "stats") && strcmp(argv[1], "calls") && strcmp(argv[1], "save"))) {
    fprintf(stderr, "usage: ps_probe stats|calls|save HOST:PORT, or ps_probe latest DIR\n");
    return 2;
  }
  memset(&p, 0, sizeof p);
  memset(&ro, 0, sizeof ro);
  p.token = env("FLOTILLA_TOKEN");
  p.timeout = env("FL_PROBE_TIMEOUT") ? atof(env("FL_PROBE_TIMEOUT")) : 5.0;
  ro.tls_ca = env("FL_PROBE_TLS_CA");
  ro.tls_cert = env("FL_PROBE_TLS_CERT");
  ro.tls_key = env("FL_PROBE_TLS_KEY");
  fl_rpc_init();
  if (fl_rpc_channel_create(argv[2], &ro, &p.ch) != FL_OK) goto out;
  if (fl_rpc_outbuf_create(0, &p.ob) != FL_OK) goto out;
  if (!strcmp(argv[1], "stats")) rc = do_stats(&p);
  else if (!strcmp(argv[1], "save")) rc = do_save(&p);
  else rc = do_calls(&p);
out:
  fl_rpc_outbuf_free(p.ob);
  fl_rpc_inbuf_free(&p.in);
  if (p.ch) grpc_channel_destroy(p.ch);
  fl_rpc_shutdown();
  return rc;
}
