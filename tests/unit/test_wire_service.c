/* test_wire_service.c - the C dispatch tables against the service blocks
 * of proto/: flotilla-pserver serves, and the trainer's client
 * calls, methods through gRPC's generic call API by path, so nothing ties
 * their tables to the `service ParameterServer` block of flotilla.proto
 * (from which other languages generate their stubs) except this test.  It
 * compares them with the ServiceDescriptors protoc-c generated from the
 * same files: every method of the service is served, under the path
 * "/<package>.<Service>/<Rpc>", with the request and answer types of the
 * proto; the server serves nothing else but grpc.health.v1.Health/Check;
 * every method the client calls is one of the service's, with its types.
 * Also the health check of a service started in this process on
 * 127.0.0.1: answered without the token, SERVING, then NOT_SERVING once the
 * daemon says it is shutting down. */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "fl_ps.h"
#include "fl_protocol.h"
#include "fl_ps_client.h"
#include "flotilla.pb-c.h"
#include "health.pb-c.h"

/* The method of service sd whose path is `path`, or NULL. */
static const ProtobufCMethodDescriptor *find(const ProtobufCServiceDescriptor *sd,
                                             const char *path) {
  char want[256];
  for (unsigned i = 0; i < sd->n_methods; i++) {
    snprintf(want, sizeof want, "/%s/%s", sd->name, sd->methods[i].name);
    if (!strcmp(want, path)) return &sd->methods[i];
  }
  return NULL;
}

/* The method (path and types) of a table entry matches the proto. */
static void check_entry(const fl_rpc_method *e, const ProtobufCMethodDescriptor *md,
                        const char *who) {
  ck_assert_msg(md != NULL, "%s: %s is not a method of proto/", who, e->path);
  ck_assert_msg(e->req == md->input, "%s: %s takes %s, the proto says %s", who, e->path,
                e->req->name, md->input->name);
  ck_assert_msg(e->resp == md->output, "%s: %s answers %s, the proto says %s", who, e->path,
                e->resp->name, md->output->name);
}

START_TEST(test_service_block_present) {
  const ProtobufCServiceDescriptor *ps = &flotilla__parameter_server__descriptor;
  const ProtobufCServiceDescriptor *h = &grpc__health__v1__health__descriptor;
  ck_assert_str_eq(ps->name, "flotilla.ParameterServer");
  ck_assert_str_eq(h->name, "grpc.health.v1.Health");
  ck_assert_uint_eq(ps->n_methods, 15);
  ck_assert_uint_eq(h->n_methods, 1);
  ck_assert_str_eq(h->methods[0].name, "Check");
}
END_TEST

START_TEST(test_server_table_matches_proto) {
  const ProtobufCServiceDescriptor *ps = &flotilla__parameter_server__descriptor;
  const ProtobufCServiceDescriptor *h = &grpc__health__v1__health__descriptor;
  fl_rpc_method e;
  size_t n = 0;
  unsigned served_ps = 0, served_h = 0;
  for (size_t i = 0; fl_ps_server_method(i, &e); i++, n++) {
    const ProtobufCMethodDescriptor *md = find(ps, e.path);
    if (md) served_ps++;
    else if ((md = find(h, e.path)) != NULL) served_h++;
    check_entry(&e, md, "flotilla-pserver");
    for (size_t j = 0; j < i; j++) {
      fl_rpc_method o;
      ck_assert(fl_ps_server_method(j, &o));
      ck_assert_msg(strcmp(o.path, e.path) != 0, "flotilla-pserver serves %s twice", e.path);
    }
  }
  /* Each method of both services once (no duplicates, so counts suffice). */
  ck_assert_msg(served_ps == ps->n_methods, "flotilla-pserver serves %u of the %u methods of %s",
                served_ps, ps->n_methods, ps->name);
  ck_assert_uint_eq(served_h, 1);
  ck_assert_uint_eq(n, ps->n_methods + 1);
}
END_TEST

START_TEST(test_client_table_matches_proto) {
  /* The client calls methods by their row of the wire's table
   * (fl_protocol.h): every row is a method of one of the two services, with
   * its types; every method of both services has a row; only Check goes
   * without the token. */
  const ProtobufCServiceDescriptor *ps = &flotilla__parameter_server__descriptor;
  const ProtobufCServiceDescriptor *h = &grpc__health__v1__health__descriptor;
  size_t n = 0, n_h = 0;
  for (int i = 0; i < FL_PROTO_COUNT; i++) {
    const fl_proto_method *m = &fl_proto_methods[i];
    const ProtobufCMethodDescriptor *md = find(ps, m->rpc.path);
    if (md) n++;
    else if ((md = find(h, m->rpc.path)) != NULL) n_h++;
    check_entry(&m->rpc, md, "ps client");
    ck_assert_str_eq(m->name, md->name);
    ck_assert_int_eq(fl_proto_find(m->rpc.path, strlen(m->rpc.path)), i);
    ck_assert_msg(!(m->flags & FL_PROTO_NO_TOKEN) == (md != find(h, m->rpc.path)),
                  "%s: only the health check goes without the token", m->rpc.path);
  }
  ck_assert_uint_ge(n, 8);
  ck_assert_uint_eq(n, ps->n_methods);
  ck_assert_uint_eq(n_h, h->n_methods);
  ck_assert_int_eq(fl_proto_find("/flotilla.ParameterServer/Nope", 30), -1);
}
END_TEST

/* Check (no token) against the server on port: the serving status, or -1
 * with the gRPC code in *code. */
static int health(grpc_channel *ch, grpc_status_code *code) {
  Grpc__Health__V1__HealthCheckRequest q = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  Grpc__Health__V1__HealthCheckResponse *r;
  fl_rpc_outbuf *ob = NULL;
  fl_rpc_inbuf in = {0};
  int status = -1;
  ck_assert_int_eq(fl_rpc_outbuf_create(0, &ob), FL_OK);
  if (fl_rpc_unary(ch, "/grpc.health.v1.Health/Check", &q.base, 5, NULL, ob, &in, code, NULL,
                   0) == FL_OK) {
    r = grpc__health__v1__health_check_response__unpack(NULL, in.len, in.data);
    ck_assert_ptr_nonnull(r);
    status = (int)r->status;
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
  }
  fl_rpc_outbuf_free(ob);
  fl_rpc_inbuf_free(&in);
  return status;
}

START_TEST(test_health_check) {
  fl_ps_core_opts co;
  fl_ps_server_opts so;
  fl_ps_core *core = NULL;
  fl_ps_server *srv = NULL;
  grpc_channel *ch = NULL;
  Flotilla__StatsRequest q = FLOTILLA__STATS_REQUEST__INIT;
  fl_rpc_outbuf *ob = NULL;
  fl_rpc_inbuf in = {0};
  grpc_status_code code;
  char target[64];
  int port = 0;

  memset(&co, 0, sizeof co);
  fl_job_defaults(&co.job);
  co.n_servers = 1;
  co.num_trainers = 1;
  ck_assert_int_eq(fl_ps_core_create(&co, &core), FL_OK);
  memset(&so, 0, sizeof so);
  so.bind_addr = "127.0.0.1:0";
  so.threads = 1;
  so.calls_per_thread = 2;
  so.rpc.token = "health-test-token";
  fl_rpc_init();
  ck_assert_int_eq(fl_ps_server_start(core, &so, &srv, &port), FL_OK);
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  ck_assert_int_eq(fl_rpc_channel_create(target, NULL, &ch), FL_OK);
  ck_assert_int_eq(health(ch, &code), GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  /* every other method still needs the token */
  ck_assert_int_eq(fl_rpc_outbuf_create(0, &ob), FL_OK);
  ck_assert_int_ne(fl_rpc_unary(ch, "/flotilla.ParameterServer/Stats", &q.base, 5, NULL, ob, &in,
                                &code, NULL, 0), FL_OK);
  ck_assert_int_eq(code, GRPC_STATUS_UNAUTHENTICATED);
  fl_ps_server_not_serving(srv);
  ck_assert_int_eq(health(ch, &code),
                   GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
  fl_rpc_outbuf_free(ob);
  fl_rpc_inbuf_free(&in);
  grpc_channel_destroy(ch);
  fl_ps_server_stop(srv);
  fl_ps_core_free(core);
  fl_rpc_shutdown();
}
END_TEST

int main(void) {
  Suite *s = suite_create("wire_service");
  TCase *tc = tcase_create("service");
  tcase_add_test(tc, test_service_block_present);
  tcase_add_test(tc, test_server_table_matches_proto);
  tcase_add_test(tc, test_client_table_matches_proto);
  tcase_add_test(tc, test_health_check);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
