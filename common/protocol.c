/* protocol.c - the tables of fl_protocol.h. */
#include <config.h>

#include <string.h>

#include "fl_protocol.h"

const fl_proto_method fl_proto_methods[FL_PROTO_COUNT] = {
#define FL_PROTO_ROW_(id, svc, nm, req, resp, fl)                                                \
  [FL_PROTO_##id] = {{"/" svc "/" nm, &req##__descriptor, &resp##__descriptor}, nm, fl},
    FL_PROTO_METHODS(FL_PROTO_ROW_)
#undef FL_PROTO_ROW_
};

int fl_proto_find(const char *path, size_t len) {
  for (int i = 0; i < FL_PROTO_COUNT; i++) {
    const char *p = fl_proto_methods[i].rpc.path;
    if (strlen(p) == len && memcmp(p, path, len) == 0) return i;
  }
  return -1;
}

Flotilla__SyncMode fl_proto_mode(int a_sync, int64_t k_steps) {
  if (!a_sync) return FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC;
  return k_steps > 0 ? FLOTILLA__SYNC_MODE__SYNC_MODE_GEO : FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC;
}

const char *fl_proto_mode_name(int mode) {
  switch (mode) {
  case FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC: return "sync";
  case FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC: return "async";
  case FLOTILLA__SYNC_MODE__SYNC_MODE_GEO: return "geo";
  default: return "?";
  }
}

int fl_proto_sparse_optim_ok(fl_optim_kind k) {
  return k == FL_OPTIM_SGD || k == FL_OPTIM_ADAGRAD || k == FL_OPTIM_ADAM ||
         k == FL_OPTIM_ROWWISE_ADAGRAD || k == FL_OPTIM_FTRL;
}
