/* ckpt_testutil.h - checkpoint comparison for the tests that check a
 * resumed run against an uninterrupted one (header-only, for test
 * programs; include it once per program). */
#ifndef FL_CKPT_TESTUTIL_H
#define FL_CKPT_TESTUTIL_H

#include <check.h>
#include <string.h>

#include "fl_ckpt.h"

/* Every record of the checkpoint files a and b is equal, bit for bit (a
 * Check failure names the first that is not); returns the number of
 * param/ records compared. */
static int same_checkpoints(const char *a, const char *b) {
  fl_ckpt *ca, *cb;
  ck_assert_int_eq(fl_ckpt_load(a, &ca), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(b, &cb), FL_OK);
  ck_assert_uint_eq(fl_ckpt_count(ca), fl_ckpt_count(cb));
  int params = 0;
  for (size_t i = 0; i < fl_ckpt_count(ca); i++) {
    fl_ckpt_record ra, rb;
    ck_assert_int_eq(fl_ckpt_record_at(ca, i, &ra), FL_OK);
    ck_assert_int_eq(fl_ckpt_find(cb, ra.name, &rb), FL_OK);
    ck_assert_uint_eq(ra.nbytes, rb.nbytes);
    ck_assert_msg(memcmp(ra.data, rb.data, ra.nbytes) == 0, "record %s differs", ra.name);
    params += strncmp(ra.name, "param/", 6) == 0;
  }
  fl_ckpt_free(ca);
  fl_ckpt_free(cb);
  return params;
}

#endif
