/* fuzz_ps_ckpt.c - a pserver taking over its state from a hostile
 * checkpoint (fl_ckpt_load_mem, then fl_ps_core_load with the dense blocks
 * and fl_ps_table_load for the sparse tables).
 *
 * Input: one setup byte, then the checkpoint image.  Setup bits: 0-1 the
 * mode (sync, async, geo; 3 = sync), bit 2 the core already holds a layout
 * (two trainers registered with parameters of 10 and 3 floats and table
 * "emb" of dim 3, every block initialised) before the load, bit 3 repair
 * the image's trailer and CRC so that mutations reach the records.  The
 * core is server 0 of 2 for 2 trainers, blocks of 4 floats, sparse tables
 * of at most 8 rows.  A checkpoint declaring more than 4096 dense floats
 * is skipped (a checkpoint sizes the server's memory by design).
 * Invariants: a checkpoint that does not verify gives FL_ECORRUPT; one
 * that fl_ps_core_load refuses gives FL_EINVAL or FL_ECORRUPT and leaves
 * every block value and step, the table row counts and the statistics'
 * block and row totals as they were (fl_ps.h: "the state is unchanged
 * then"); after an accepted one every block the server holds has the
 * value of the checkpoint's record, and the trainers can register and
 * pull. */
#include <config.h>

#include <string.h>
#include <zlib.h>

#include "fl_ps.h"
#include "fl_ps_layout.h"
#include "fuzz.h"
#include "fuzz_ps.h"

#define FUZZ_MAX_INPUT (256 * 1024)
#define BLOCK 4
#define MAX_IDS 64
#define MAX_DENSE_FLOATS 4096

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

typedef struct snapshot {
  int n;
  uint32_t id[MAX_IDS];
  size_t len[MAX_IDS];
  int64_t step[MAX_IDS];
  float value[MAX_IDS][BLOCK];
  size_t emb_rows;
  int32_t dense_blocks;
  uint64_t dense_elements, sparse_rows;
} snapshot;

static void snap(fl_ps_core *c, snapshot *s) {
  Flotilla__StatsResponse st = FLOTILLA__STATS_RESPONSE__INIT;
  memset(s, 0, sizeof *s);
  for (uint32_t id = 0; id < MAX_IDS; id++)
    for (size_t n = 1; n <= BLOCK; n++) {
      if (fl_ps_core_block_value(c, id, s->value[s->n], n, &s->step[s->n]) != FL_OK) continue;
      s->len[s->n] = n;
      s->id[s->n++] = id;
      break;
    }
  fl_ps_table *t = fl_ps_core_table(c, "emb");
  s->emb_rows = t ? fl_ps_table_rows(t) : 0;
  fl_ps_core_stats(c, &st);
  s->dense_blocks = st.dense_blocks;
  s->dense_elements = st.dense_elements;
  s->sparse_rows = st.sparse_rows;
}

static void prepare(fl_ps_core *c, fl_ps_mode mode) {
  uint64_t numel[2] = {10, 3};
  fl_ps_layout *l;
  for (int t = 0; t < 2; t++)
    FUZZ_CHECK(fuzz_ps_register(c, t, mode, BLOCK, 0) == FL_OK, "register: %s",
               fl_ps_core_last_error());
  FUZZ_CHECK(fl_ps_layout_build(numel, 2, BLOCK, 2, &l) == FL_OK, "layout");
  for (uint32_t id = 0; id < l->n_blocks; id++) {
    if (l->blocks[id].server != 0) continue;
    float v[BLOCK] = {0.5f, -1.5f, 2.0f, 3.0f};
    int64_t shape = (int64_t)l->blocks[id].n;
    Flotilla__PushDenseRequest q = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
    Flotilla__PushDenseResponse r = FLOTILLA__PUSH_DENSE_RESPONSE__INIT;
    Flotilla__DenseBlock db = FLOTILLA__DENSE_BLOCK__INIT, *dbs = &db;
    Flotilla__Tensor x = FLOTILLA__TENSOR__INIT;
    x.n_shape = 1;
    x.shape = &shape;
    x.data.data = (uint8_t *)v;
    x.data.len = l->blocks[id].n * sizeof(float);
    db.block = id;
    db.value = &x;
    q.kind = FLOTILLA__PUSH_KIND__PUSH_INIT;
    q.n_blocks = 1;
    q.blocks = &dbs;
    FUZZ_CHECK(fl_ps_core_push_dense(c, &q, &r) == FL_OK, "init: %s", fl_ps_core_last_error());
  }
  fl_ps_layout_free(l);
}

static void repair(uint8_t *buf, size_t len) {
  if (len < 48) return;
  size_t t = len - 32;
  memcpy(buf + t, "FLCKEND\n", 8);
  for (int i = 0; i < 8; i++) buf[t + 16 + i] = (uint8_t)((uint64_t)t >> (8 * i));
  memset(buf + t + 28, 0, 4);
  uLong crc = crc32(crc32(0L, Z_NULL, 0), buf, (uInt)(t + 24));
  for (int i = 0; i < 4; i++) buf[t + 24 + i] = (uint8_t)(crc >> (8 * i));
}

/* More dense floats than the harness lets a checkpoint declare. */
static int too_big(const fl_ckpt *ck) {
  fl_ckpt_record r;
  uint64_t total = 0;
  if (fl_ckpt_find(ck, "dense/numel", &r) != FL_OK || r.dtype != FL_CKPT_U64 || r.ndim != 1)
    return 0;
  for (size_t i = 0; i < r.nbytes / 8; i++) {
    uint64_t v;
    memcpy(&v, (const uint8_t *)r.data + 8 * i, 8);
    if (v > MAX_DENSE_FLOATS || (total += v) > MAX_DENSE_FLOATS) return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const fl_ps_mode modes[4] = {FL_PS_SYNC, FL_PS_ASYNC, FL_PS_GEO, FL_PS_SYNC};
  fl_ps_core *c = NULL;
  fl_ckpt *ck = NULL;
  snapshot before, after;

  if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
  uint8_t setup = data[0];
  fl_ps_mode mode = modes[setup & 3];
  size_t len = size - 1;
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return 0;
  memcpy(buf, data + 1, len);
  if (setup & 8) repair(buf, len);
  fl_status st = fl_ckpt_load_mem(buf, len, "fuzz.flc", &ck);
  free(buf);
  if (st != FL_OK) {
    FUZZ_CHECK(st == FL_ECORRUPT, "ckpt status %d", (int)st);
    return 0;
  }
  if (too_big(ck)) {
    fl_ckpt_free(ck);
    return 0;
  }

  c = fuzz_ps_core_new(mode, BLOCK);
  if (setup & 4) prepare(c, mode);

  snap(c, &before);
  st = fl_ps_core_load(c, ck, "fuzz.flc");
  if (st != FL_OK) {
    FUZZ_CHECK(st == FL_EINVAL || st == FL_ECORRUPT, "load status %d", (int)st);
    snap(c, &after);
    FUZZ_CHECK(!memcmp(&before, &after, sizeof before),
               "a refused checkpoint changed the server's state (%d blocks before, %d after; "
               "emb rows %zu -> %zu)",
               before.n, after.n, before.emb_rows, after.emb_rows);
  } else {
    /* Every block this server held is replaced by the checkpoint's. */
    for (int i = 0; i < before.n; i++) {
      char name[64];
      fl_ckpt_record r;
      snprintf(name, sizeof name, "dense/%u/meta", before.id[i]);
      FUZZ_CHECK(fl_ckpt_find(ck, name, &r) == FL_OK,
                 "loaded, but the checkpoint has no %s for block %u of this server", name,
                 before.id[i]);
    }
    /* Every block this server holds now is the checkpoint's. */
    snap(c, &after);
    for (int i = 0; i < after.n; i++) {
      char name[64];
      fl_ckpt_record r;
      snprintf(name, sizeof name, "dense/%u/value", after.id[i]);
      FUZZ_CHECK(fl_ckpt_find(ck, name, &r) == FL_OK && r.nbytes == after.len[i] * sizeof(float) &&
                     !memcmp(r.data, after.value[i], r.nbytes),
                 "loaded, but block %u is not the checkpoint's %s", after.id[i], name);
    }
    /* The trainers come back and pull what was loaded. */
    st = fuzz_ps_register(c, 0, mode, BLOCK, 0);
    FUZZ_CHECK(st == FL_OK || st == FL_EINVAL, "register after load: %d", (int)st);
    snap(c, &after);
    for (int i = 0; st == FL_OK && i < after.n; i++) {
      fl_status ps = fl_ps_core_pull_check(c, 0, 0, &after.id[i], 1);
      FUZZ_CHECK(ps == FL_OK || ps == FL_ESTATE, "pull of block %u: %d", after.id[i], (int)ps);
    }
  }
  fl_ps_core_free(c);
  fl_ckpt_free(ck);
  return 0;
}
